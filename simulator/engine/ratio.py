"""SGLang's admission reserve for running requests (the `ratio` an Engine of scheduler "sglang" holds)."""
from __future__ import annotations


class NewTokenRatio:
    """SGLang's new_token_ratio (managers/scheduler.py, 0.5.1.post1): the share of their remaining
    output that running requests keep reserved against admissions. It decays by (init - min) /
    decay_steps per decode step down to min; a retraction restarts it from
    (decoded + 20 x retracted) / total max_new_tokens of the running batch, at most 1 (retract_decode,
    RETRACT_DECODE_STEPS = 20)."""

    __slots__ = ("init", "min", "decay", "start", "steps")

    def __init__(self, init: float, minimum: float, decay_steps: int):
        self.init, self.min, self.decay = init, minimum, (init - minimum) / max(decay_steps, 1)
        self.start, self.steps = init, 0

    @classmethod
    def of(cls, ec) -> "NewTokenRatio":
        return cls(ec.sglang_init_new_token_ratio, ec.sglang_min_new_token_ratio,
                   ec.sglang_new_token_ratio_decay_steps)

    @property
    def value(self) -> float:
        return max(self.min, self.start - self.decay * self.steps)

    def value_after(self, k: int) -> float:
        """`value` after k more decode steps."""
        return max(self.min, self.start - self.decay * (self.steps + k))

    def decoded(self, k: int) -> None:
        self.steps += k

    def retracted(self, batch, n_retracted: int) -> None:
        """After a retraction, from the batch that remains."""
        gen, out = sum(batch.generated()), sum(batch.output)
        self.start = min(1.0, (gen + 20 * n_retracted) / max(out, 1))
        self.steps = 0
