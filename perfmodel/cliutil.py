"""What the command-line tools (perfmodel, microbench) share: output paths checked before the work,
files written atomically, and clean exits (Ctrl-C, a closed stdout pipe).

Exit codes of run_cli: the command's own; 130 on Ctrl-C (`interrupted` on stderr); 141 (128 +
SIGPIPE, what cat or seq report under `set -o pipefail`) when the reader of stdout went away, as in
`perfmodel estimate | head -1`. No traceback in either case.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Adds '(default: X)' to every option with a default that its help does not already state."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def check_writable(path, flag: str = "--out") -> None:
    """ValueError naming `path` unless a file can be written there: not a directory, its folder
    exists and takes a new file (probed by creating and removing one, so ACLs, read-only mounts
    and permissions all count), and an existing file there is writable."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{flag} {path}: is a directory; give a file path")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise ValueError(f"{flag} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: {parent} is not a folder")
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{flag} {path}: file is not writable")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{p.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot write in {parent} ({e.strerror or e})") from None


def atomic_write_text(path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then os.replace it: a reader sees the old
    file or the whole new one, never a part (an interrupted write leaves the old file). The new file
    gets the old one's permissions, or the umask's default."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent if str(p.parent) else ".", prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            mode = p.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def run_cli(fn, argv=None) -> int:
    """fn(argv) with the clean exits of a command-line tool: Ctrl-C prints `interrupted` and gives
    130; a closed stdout pipe stops the output quietly and gives 141. No traceback either way."""
    try:
        rc = fn(argv)
        sys.stdout.flush()  # a pipe closed after the last write breaks here, not at interpreter exit
        return rc
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _stdout_to_devnull()
        return EXIT_BROKEN_PIPE


def _stdout_to_devnull() -> None:
    """After a broken pipe: point stdout at /dev/null, so that the interpreter's exit flush of what
    is still buffered does not raise a second BrokenPipeError ("Exception ignored ...")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (captured in tests)
        pass
