"""Bad-input errors and warnings for traces: one line naming file, line and field."""
from __future__ import annotations


class TraceError(ValueError):
    """A trace (file or spec) that cannot be read; str() is one line: `file: line N: field: problem`."""

    def __init__(self, source: object, problem: str, *, line: int | None = None,
                 field: str | None = None):
        self.source, self.line, self.field = str(source), line, field
        self.problem = " ".join(str(problem).split())  # always one line, whatever we were given
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [self.source]
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        return ": ".join(parts + [self.problem])


class TraceWarning(UserWarning):
    """Something fixed up while reading (e.g. timestamps sorted); --strict turns it into a TraceError."""
