"""Entry point the hook library executes (python -E this-file).  It puts the
package's parent directory first on sys.path instead of this directory, so
that no module of the package can shadow a standard one."""
import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from libmemleak.reporter import main  # noqa: E402

sys.exit(main())
