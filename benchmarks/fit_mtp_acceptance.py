"""Fit perfmodel.specdec.MTP_ACCEPTANCE on the H100 TRT-LLM DeepSeek disagg rows and print the fit.

Where InferenceX ran a plain and an MTP-3 recipe of the same TEP16 decode shape at one concurrency
(simulator/apps/validate/recipes.py), silicon_h100_sxm.csv holds two rows with identical columns and two TPOTs; the
MTP one is the lower. Their ratio TPOT(plain) / TPOT(MTP) is what the acceptance p sets, with the base step
cost cancelling out (the model's ratio: plain step / per-token MTP cost, at the recipe's decode batch and the
mean context of its requests). Usage: python benchmarks/fit_mtp_acceptance.py [--measurements CSV]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import e2e_h100_csv  # noqa: E402
from perfmodel.calibration.profile import load_profile  # noqa: E402
from perfmodel.framework import framework_preset  # noqa: E402
from perfmodel.hardware import load_hardware  # noqa: E402
from perfmodel.layout import ParallelLayout  # noqa: E402
from perfmodel.modelspec import load_model  # noqa: E402
from perfmodel.specdec import MTP_ACCEPTANCE, SpecDecode, per_token_affine  # noqa: E402
from perfmodel.steptable import StepTable  # noqa: E402
from simulator.apps.validate.recipes import TRTLLM_DSR1_H100  # noqa: E402


def twin_pairs(df: pd.DataFrame) -> list[tuple]:
    """(isl, osl, decode batch, plain TPOT, MTP TPOT) of each concurrency with a plain and an MTP-3 TEP16
    recipe of the same decode batch, from the rows' two distinct measured TPOTs."""
    rows = df[(df["mode"] == "disagg") & (df["backend"] == "trtllm") & (df["system"] == "h100_sxm")
              & df["model_path"].str.contains("DeepSeek")]
    out = []
    for (isl, osl, conc), recs in sorted(TRTLLM_DSR1_H100.items()):
        plain = [r for r in recs if r.mtp == 0 and not r.gen_attention_dp]
        mtp = [r for r in recs if r.mtp == 3 and not r.gen_attention_dp]
        if not (plain and mtp and plain[0].gen_max_batch == mtp[0].gen_max_batch):
            continue
        tpots = sorted(set(rows[(rows["isl"] == isl) & (rows["osl"] == osl)
                                & (rows["silicon_concurrency"] == conc)]["silicon_tpot_ms"].round(6)))
        if len(tpots) == 2:
            out.append((isl, osl, plain[0].gen_max_batch, tpots[1], tpots[0]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", default=str(e2e_h100_csv()))
    a = ap.parse_args()
    pairs = twin_pairs(pd.read_csv(a.measurements))
    spec = load_model("deepseek-ai/DeepSeek-R1", weights="fp8", kv="fp8")
    tab = StepTable(spec, ParallelLayout(tp=16, ep=16), load_hardware("h100"), load_profile("h100_sxm"),
                    framework_preset("trtllm", ""), max_tokens=8192, max_seqs=2048)
    print(f"{len(pairs)} twin pairs (isl, osl, decode batch, TPOT plain / MTP ms):")
    for p in pairs:
        print(f"  {p[0]}/{p[1]} batch {p[2]}: {p[3]:.2f} / {p[4]:.2f} = {p[3] / p[4]:.2f}")
    best = None
    for acc in np.round(np.arange(0.50, 0.801, 0.05), 2):
        errs = []
        for isl, osl, b, t_plain, t_mtp in pairs:
            keys = b * 0.9 * (isl + osl / 2)  # mean context: sa-bench lengths in [0.8 L, L], halfway through
            c0, c1 = tab.decode_affine(b)
            m0, m1 = per_token_affine(tab, b, SpecDecode(3, float(acc)), spec.num_layers)
            errs.append((c0 + c1 * keys) / (m0 + m1 * keys) / (t_plain / t_mtp) - 1.0)
        med = float(np.median(np.abs(errs)))
        print(f"acceptance {acc:.2f}: ratio error median {med:.1%}, bias {np.median(errs):+.1%}")
        best = (med, acc) if best is None or med < best[0] else best
    print(f"best {best[1]:.2f} (median {best[0]:.1%}); perfmodel.specdec.MTP_ACCEPTANCE = {MTP_ACCEPTANCE}")


if __name__ == "__main__":
    main()
