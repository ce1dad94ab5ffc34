"""Writing one fitted section into a shipped profile JSON (the `moe` and `mla_decode` fit CLIs): the
profile's formatting, a section replaced or added with every other byte unchanged, and the CLIs' input
check (one error line, not a traceback)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .profile import profile_path


def profile_json(obj) -> str:
    """JSON as the profile writes it (indent 1), number lists on one line."""
    text = json.dumps(obj, indent=1)
    return re.sub(r"\[([^\[\]{}]*)\]", lambda m: "[" + re.sub(r"\n\s*", "", m.group(1)) + "]", text)


def with_section(text: str, key: str, section: dict, before: str | None = None) -> str:
    """The profile JSON text with its top-level `key` replaced or added: just before the top-level key
    `before` where the file has it, else last; every other byte unchanged."""
    marker = f',\n "{key}": '
    start = text.find(marker)
    if start >= 0:  # drop the old section: it runs to the next top-level key (one space deep) or the end
        end = text.find(',\n "', start + len(marker))
        text = text[:start] + (text[end:] if end >= 0 else "\n}\n")
    block = marker + profile_json(section).replace("\n", "\n ")
    cut = text.find(f',\n "{before}": ') if before else -1
    out = text[:cut] + block + text[cut:] if cut >= 0 else text.rstrip()[:-1].rstrip() + block + "\n}\n"
    json.loads(out)  # still one JSON object
    return out


def checked_inputs(profile: str, files) -> Path | None:
    """The profile JSON a fit CLI writes (a name in perfmodel/profiles or a path), or None after printing
    one error line when it or one of `files` (the tables the fit reads) is missing."""
    try:
        path = profile_path(profile)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        print(f"error: {missing[0]} not found", file=sys.stderr)
        return None
    return path
