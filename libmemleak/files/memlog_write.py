"""Writing a .memlog report (docs/memlog.md): its text from a header and
entries, and the file written whole or not at all.  (Reading it back:
memlog.py.)"""

import os
import secrets

from libmemleak.files.memlog import header_text, render_frames


def render_chunks(header, entries, chunk_bytes=1 << 20):
    """The report text in pieces of about chunk_bytes, so a report of a
    million stacks never has to exist as one string."""
    lines = [f"# {key}: {header_text(value)}" for key, value in header]
    size = 0
    for e in entries:
        first = f"{e.bytes:+d}"
        if e.blocks is not None:
            first += f" {e.blocks:+d}"
        lines.append(" ".join([first, *e.extra]) if e.extra else first)
        text = render_frames(e.frames) if e.frames_text is None else e.frames_text
        if text:
            lines.append(text)
            size += len(text)
        if size >= chunk_bytes:
            yield "\n".join(lines) + "\n"
            lines, size = [], 0
    if lines:
        yield "\n".join(lines) + "\n"


def render(header, entries):
    """header: iterable of (key, value); entries: iterable of Entry."""
    return "".join(render_chunks(header, entries))


def write_report(directory, name, text, before_rename=None):
    """Write `text` (a string, or an iterable of strings or bytes written in turn)
    as directory/name, complete or not at all: under a fresh
    temporary name (owner-only, exclusive create, no symlink followed), then
    renamed into place.  rename() replaces a symlink planted at `name`
    without following it, so no other file can be written through it.
    `before_rename`: called just before the rename (the reporter says the
    report may be in place from then on)."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        try:
            for piece in ([text] if isinstance(text, str) else text):
                if isinstance(piece, str):
                    piece = piece.encode("utf-8", "surrogateescape")
                view = memoryview(piece)
                while view:
                    view = view[os.write(fd, view):]
        except OSError:
            os.close(fd)
            _unlink_quietly(tmp, dir_fd)
            raise
        os.close(fd)
        try:
            if before_rename is not None:
                before_rename()
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            _unlink_quietly(tmp, dir_fd)
            raise
    finally:
        os.close(dir_fd)
    return os.path.join(directory, name)


def _unlink_quietly(name, dir_fd):
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass  # the write error being raised is the one worth reporting
