import sys

from libmemleak.cli import main

sys.exit(main())
