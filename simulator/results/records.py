"""Columnar records of a run: one row per request (numpy), one row per step or stretch (array)."""
from __future__ import annotations

import array
import struct
from typing import Any, Final, NamedTuple

import numpy as np
import pandas as pd
from mypy_extensions import mypyc_attr

from perfmodel.batch import StepAgg


class StepRow(NamedTuple):
    """One row of steps.parquet: an engine step, or a fast-forwarded stretch of `steps` decode steps (its token
    columns, StepAgg's, are those of its first step). `mode`: StepRecords.mode_code of the mode's name; `waiting`:
    requests queued where the engine's policy queues them, at the step's end; `switch_s`: time spent switching mode
    or re-sharding before the step. Built by name (`step_row`) by every engine. (A class, not NamedTuple(...) over
    StepAgg._fields, so that mypyc compiles the module: tests/test_invariants_check.py holds the token fields
    to StepAgg's.)"""

    start_s: float
    duration_s: float
    engine: int
    mode: float
    steps: int
    prefill_tokens: float  # StepAgg's fields, in its order
    prefill_seqs: float
    prefill_pairs: float
    prefill_kv_tokens: float
    decode_seqs: float
    decode_kv_tokens: float
    kv_used_tokens: float
    waiting: int
    switch_s: float


STEP_COLUMNS = StepRow._fields
# one row's bytes, native doubles: array.extend converts each value with a PyArg_Parse ("d") of ~260 instructions,
# twice (~9k a row, 4% of a replay at half load under callgrind); struct.pack converts with PyFloat_AsDouble, the same
# conversion (so the same doubles, ints and numpy scalars included), ~20 each
_ROW: Final = struct.Struct(f"@{len(STEP_COLUMNS)}d")
# the rows' array grows by this many zero bytes (8,192 rows) at a time, and each row is packed into its place
# (Struct.pack_into): packing a bytes object and appending it (frombytes) cost a call and a copy more a row, ~1k
# instructions, 1% of a replay at half load
_GROW: Final = bytes(_ROW.size * 8192)
_VALUE_BYTES: Final = _ROW.size // len(STEP_COLUMNS)  # (one double)


def step_row(*, start_s: float, duration_s: float, engine: int, mode: float, steps: int, agg,
             kv_used_tokens: float, waiting: int, switch_s: float = 0.0) -> StepRow:
    """A StepRow from a step's aggregates (`agg`: a StepAgg)."""
    return StepRow(start_s, duration_s, engine, mode, steps, agg.prefill_tokens, agg.prefill_seqs,
                   agg.prefill_pairs, agg.prefill_kv_tokens, agg.decode_seqs, agg.decode_kv_tokens,
                   kv_used_tokens, waiting, switch_s)


@mypyc_attr(native_class=False)  # (compiled, a plain class still: the kernels' serving ranks pickle it)
class RequestRecords:
    """Per-request outcome arrays, indexed by the request's position in the workload."""

    def __init__(self, workload):
        df = workload.requests
        n = len(df)
        self.request_id = df["request_id"].to_numpy()
        self.arrival_s = df["arrival_s"].to_numpy(dtype=float)
        self.input_tokens = df["input_tokens"].to_numpy(dtype=np.int64)
        self.output_tokens = df["output_tokens"].to_numpy(dtype=np.int64)
        self.total_tokens = (self.input_tokens + self.output_tokens).tolist()  # Python ints: per-request hot path
        self.priority = df["priority"].to_numpy(dtype=np.int64)
        self.issued_s = np.full(n, np.nan)  # when its client sent it (closed loop: may be later; TTFT's start)
        self.scheduled_s = np.full(n, np.nan)  # first step that ran it
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.generated = np.zeros(n, dtype=np.int64)
        self.engine = np.full(n, -1, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.reject_reason = np.full(n, "", dtype=object)
        # prefix caching: the trace's block hashes (None without them); per request the tokens hit
        # at its first admission, and over all its admissions the prompt tokens looked up and hit
        self.prefix_blocks = df["prefix_blocks"].tolist() if "prefix_blocks" in df.columns else None
        self.prefix_caching = False  # set by the run: caching on and the trace carries block hashes
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        self.prefix_query_tokens = np.zeros(n, dtype=np.int64)
        self.prefix_hit_tokens = np.zeros(n, dtype=np.int64)
        # disaggregated prefill/decode (--policy disagg): the prefill instance, the wait for decode KV
        # (prefill end -> decode admission) and the KV transfer (perfmodel.disagg) of each request
        self.disaggregated = False  # set by the run when the policy is disagg
        self.prefill_engine = np.full(n, -1, dtype=np.int64)
        self.prefill_end_s = np.full(n, np.nan)  # its prefill's end (first token sampled, KV ready to send)
        self.kv_wait_s = np.full(n, np.nan)
        self.kv_transfer_s = np.full(n, np.nan)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def frame(self) -> pd.DataFrame:
        """One row per request: times in seconds, ttft/tpot/e2el in ms, status."""
        done = ~np.isnan(self.finish_s)
        out = np.maximum(self.output_tokens, 1)
        df = pd.DataFrame({
            "request_id": self.request_id, "arrival_s": self.arrival_s, "issued_s": self.issued_s,
            "scheduled_s": self.scheduled_s, "first_token_s": self.first_token_s, "finish_s": self.finish_s,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "generated_tokens": self.generated, "priority": self.priority, "engine": self.engine,
            "preemptions": self.preemptions,
            "status": np.where(done, "completed", np.where(self.reject_reason != "", "rejected", "unfinished")),
            "reject_reason": self.reject_reason,
        })
        if self.prefix_caching:  # (only then: runs without caching keep their columns)
            df["cached_tokens"] = self.cached_tokens
            df["prefix_query_tokens"] = self.prefix_query_tokens
            df["prefix_hit_tokens"] = self.prefix_hit_tokens
        if self.disaggregated:  # (only then, as the prefix-cache columns)
            df["prefill_engine"] = self.prefill_engine
            df["kv_wait_ms"] = 1e3 * self.kv_wait_s
            df["kv_transfer_ms"] = 1e3 * self.kv_transfer_s
        df["queue_ms"] = 1e3 * (self.scheduled_s - self.issued_s)
        df["ttft_ms"] = 1e3 * (self.first_token_s - self.issued_s)
        df["e2el_ms"] = 1e3 * (self.finish_s - self.issued_s)
        with np.errstate(invalid="ignore", divide="ignore"):  # one output token: no TPOT (NaN)
            df["tpot_ms"] = np.where(out > 1, 1e3 * (self.finish_s - self.first_token_s) / (out - 1), np.nan)
        return df


class _Released:
    """StepRecords' rows once framed for good (frame(final=True)): adding more raises."""

    __slots__ = ()

    def frombytes(self, _room) -> None:  # (StepRecords._grow's)
        raise RuntimeError("step records were framed for good (StepRecords.frame(final=True)): no more rows")


class StepRecords:
    """Append-only rows in one array('d'), row-major (a row is one call, 8 bytes a value): one row
    per engine step, or per fast-forwarded stretch of `steps` identical-shape decode steps (then the
    token columns are those of its first step)."""

    def __init__(self):
        self._rows: Any = array.array("d")
        self._off = 0  # bytes of rows written (the array holds _cap: rows past _off are zeros to write over)
        self._cap = 0
        self.modes: list[str] = []  # mode names, indexed by the float code in column "mode"
        self._mode_code: dict = {}
        self._final: Any = None  # the frame, once framed for good (its rows released)

    def mode_code(self, name: str) -> float:
        if name not in self._mode_code:
            self._mode_code[name] = float(len(self.modes))
            self.modes.append(name)
        return self._mode_code[name]

    def append(self, row: StepRow) -> None:
        """One row (a StepRow: its fields by name, never a bare tuple)."""
        if type(row) is not StepRow:
            raise TypeError(f"a step row is a StepRow ({', '.join(STEP_COLUMNS)}), got {type(row).__name__}")
        if self._off == self._cap:  # (the kernels' path, not the engine's: add_row packs)
            self._grow()
        at = self._off // _VALUE_BYTES  # (its values converted as array.extend did, before rows were packed)
        self._rows[at:at + len(STEP_COLUMNS)] = array.array("d", row)
        self._off += _ROW.size

    def add(self, *, start_s: float, duration_s: float, engine: int, mode: float, steps: int, agg,
            kv_used_tokens: float, waiting: int, switch_s: float) -> None:
        """One row from StepRow's fields by name (`agg`: the step's StepAgg), without building the StepRow."""
        self.add_row(start_s, duration_s, engine, mode, steps, agg, kv_used_tokens, waiting, switch_s)

    def add_row(self, start_s, duration_s, engine, mode, steps, agg: StepAgg, kv_used_tokens, waiting,
                switch_s) -> None:
        """`add` with its arguments in StepRow's order (the engine core's path, once per step: a keyword call
        binds ~9 names more slowly)."""
        off = self._off
        if off == self._cap:
            self._grow()
        _ROW.pack_into(self._rows, off, start_s, duration_s, engine, mode, steps, agg.prefill_tokens, agg.prefill_seqs,
                       agg.prefill_pairs, agg.prefill_kv_tokens, agg.decode_seqs, agg.decode_kv_tokens, kv_used_tokens,
                       waiting, switch_s)
        self._off = off + _ROW.size

    def _grow(self) -> None:
        """Room for _GROW's rows more (framed for good: raises, _Released)."""
        self._rows.frombytes(_GROW)
        self._cap += len(_GROW)

    def __len__(self) -> int:
        return self._off // _ROW.size

    def frame(self, final: bool = False) -> pd.DataFrame:
        """The rows as a DataFrame. `final` (the run ended): the rows are released once framed (~235 MB at the
        2.1M rows of a 1M-request run at half load, issue 36's 1 GB bound) and every later call returns the
        same frame (a copy-on-write copy: a caller's changes stay its own); adding rows then raises."""
        if self._final is not None:
            return self._final.copy(deep=False)
        n = self._off // _VALUE_BYTES  # (values written; the array's room past them holds zeros)
        rows = np.frombuffer(self._rows, dtype=float, count=n).reshape(-1, len(STEP_COLUMNS)) if n \
            else np.zeros((0, len(STEP_COLUMNS)))
        # the frame's one float block is the rows transposed (columns x rows), filled 65,536 rows at a time so each
        # piece's reads and writes stay in cache: a frame built from the columns' strided views gathered each and then
        # stacked them, ~0.9 s at the 2.1M rows of a 1M-request run at half load (issue 36); the same values. At the
        # peak the rows and one copy, ~235 MB each there (issue 36's 1 GB bound)
        block = np.empty((len(STEP_COLUMNS), len(rows)))
        for i in range(0, len(rows), 65536):
            block[:, i:i + 65536] = rows[i:i + 65536].T
        df = pd.DataFrame(block.T, columns=[str(c) for c in STEP_COLUMNS], copy=False)
        del rows, block  # (the frame holds the block)
        df["engine"] = df["engine"].astype(np.int64)
        df["steps"] = df["steps"].astype(np.int64)
        df["mode"] = pd.Categorical.from_codes(df["mode"].astype(int), categories=self.modes) \
            if self.modes else pd.Categorical([])
        if final:
            self._final, self._rows, self._cap = df, _Released(), self._off  # (a row more: _grow raises)
            return df.copy(deep=False)
        return df
