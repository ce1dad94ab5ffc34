"""Pipeline parallelism: contiguous layer blocks per stage, micro-batched send/recv of the
hidden state and residual between stages (vLLM's IntermediateTensors: 2*n*d*act_bytes)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .comm import Group, irecv, isend
from .kvcache import TokenBatch, make_ctx


def apply_pp(model, layout, group: Group):
    """Keep stage group.index's layers (embedding on the first stage, norm and head on the last)."""
    if layout.pp != group.size:
        raise ValueError(f"layout pp={layout.pp} but the PP group has {group.size} ranks {group.ranks}")
    layout.validate(model.spec)
    counts = layout.layers_per_stage(model.spec.num_layers)
    start = sum(counts[:group.index])
    model.layers = nn.ModuleList(list(model.layers)[start:start + counts[group.index]])
    if group.index > 0:
        del model.embed
    if group.index < group.size - 1:
        del model.norm, model.head
    return model


def micro_batches(batch: TokenBatch, m: int) -> list[TokenBatch]:
    """Split the sequences into m contiguous groups of near-equal count (a sequence is in one)."""
    return [batch.subset(part.tolist()) for part in np.array_split(np.array(batch.seq_ids, dtype=object), m)]


def pipeline_step(model, cache, batch: TokenBatch, group: Group, m: int | None = None) -> dict:
    """Run `batch` through this stage as m = min(PP, seqs) micro-batches: receive (2, n, d) from
    the previous stage, run the layers, send to the next ('pp_stage') or produce the logits."""
    stage, last = group.index, group.index == group.size - 1
    m = m or max(1, min(group.size, len(batch.seq_ids)))
    out, sends = {}, []
    for i, mb in enumerate(micro_batches(batch, m)):
        ctx = make_ctx(mb, cache)
        if stage == 0:
            h, res = model.embed(mb.tokens), None
        else:
            p = next(model.parameters())
            buf = torch.empty(2, ctx.n, model.spec.hidden_size, dtype=p.dtype, device=p.device)  # (h, res)
            irecv(buf, group.ranks[stage - 1], tag=i).wait()
            h, res = buf[0], buf[1]
        h, res = model.run_layers(h, res, ctx)
        if last:
            logits = model.logits(h, res, ctx)  # (seqs of mb, V)
            out.update({sid: logits[j] for j, sid in enumerate(ctx.out_ids)})
        else:
            sends.append(isend(torch.stack([h, res]), group.ranks[stage + 1], "pp_stage", tag=i))  # 2*n*d
        cache.commit(ctx)
    for w in sends:
        w.wait()
    return out
