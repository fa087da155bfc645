"""`TorchStaticGraphActor` (``--backend torch-static-graph``): the static decoder of `torch_static` — mini-batches
(*groups*) of at most ``gen_batch`` rows generating in calls of C tokens, round-robin, the KV carried from
call to call — with each group's KV in static slots and its decode iterations replayed as CUDA graphs
(:mod:`oppo_real.backends.graph_decoder`), as `torch_graph` does for continuous batching.

Everything about calls, groups, joining, ending and handing out tokens is `TorchStaticActor`'s; only the
forwards differ:

- each group draws a `SlotDecoder` of ``gen_batch`` slots from a pool the actor keeps, so a decoder's
  captured graphs serve group after group; rows sit in slots in group order. A group's slots are capped
  at ``max_num_seqs`` and at what ``kv_cache_bytes`` holds of ``max_model_len``-position slots;
- a decode iteration runs every row of the group — rows done for this call feed padding, which costs the
  iteration what a padded row costs and writes only a position the row's next real token overwrites —
  padded to the batch bucket and replayed as a graph on a GPU (eagerly on the CPU);
- a prefill writes the joining rows' whole contexts into the next slots (SDPA, causal);
- rows that leave are compacted in order (one indexed copy of their KV).

So the outputs equal `TorchStaticActor`'s (greedy token for token; sampled too: both draw with the
counter-based noise of `backends.sampling`). With ``gen_batch`` None a group holds at most that cap of
rows (further requests open another group, where the unbatched static engine the simulator mirrors has
one: keep the cap above the step's requests to match it). Timing records (``record_timings``) give a
decode's ``width`` as its longest context.
"""

from __future__ import annotations

import torch

from oppo_real.backends.graph_decoder import SlotDecoder, slots_for
from oppo_real.backends.torch_static import TorchStaticActor, TorchStaticConfig, _Group
from oppo_sim.core.errors import ConfigError


class TorchStaticGraphActor(TorchStaticActor):
    """`TorchStaticActor` with each group's KV in static slots and its decode iterations graph-captured."""

    def __init__(self, cfg: TorchStaticConfig, model: torch.nn.Module | None = None, max_num_seqs: int = 256,
                 cuda_graphs: bool = True, kv_cache_bytes: int | None = None) -> None:
        if max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
        super().__init__(cfg, model)
        cap = slots_for(self.model, cfg.max_model_len, max_num_seqs, kv_cache_bytes)  # a group's rows at most
        self.group_slots = min(cfg.gen_batch or cap, cap)
        self.cuda_graphs = cuda_graphs
        self._pool: list[SlotDecoder] = []

    def _assign(self) -> None:
        """As the static decoder's, with groups of at most ``group_slots`` rows."""
        while self._waiting:
            g = next((g for g in self._groups if len(g.seqs) + len(g.joining) < self.group_slots), None)
            if g is None:
                g = _Group()
                self._groups.append(g)
            g.joining.append(self._waiting.popleft())

    def _dec(self, g: _Group) -> SlotDecoder:
        """The group's decoder: one of the pool no other live group holds (a new one if all are held)."""
        dec = getattr(g, "dec", None)
        if dec is None:
            held = {id(getattr(x, "dec", None)) for x in self._groups}
            dec = next((d for d in self._pool if id(d) not in held), None)
            if dec is None:
                dec = SlotDecoder(self.model, self.group_slots, self.cfg.max_model_len, self.cfg.sampling.temperature,
                                  self.cuda_graphs)
                self._pool.append(dec)
            g.dec = dec
        return dec

    def kv_bytes(self) -> int:
        return sum(d.kv_bytes() for d in self._pool)

    def _release_kv(self) -> None:
        """On `sleep`: the decoders' slots and captured graphs (allocated and captured again lazily)."""
        for d in self._pool:
            d.release()

    def close(self) -> None:
        super().close()
        self._release_kv()
        self._pool = []

    # ------------------------------------------------------------------ forwards
    def _prefill(self, g: _Group) -> dict:
        fresh = g.joining
        p = max(len(s.context) for s in fresh)
        tok, lp = self._dec(g).prefill(len(g.seqs), [s.context for s in fresh], [s.seed for s in fresh])
        tok = self._book(tok, lp, fresh, None)
        g.last = tok if g.last is None else torch.cat([g.last, tok])
        g.seqs = g.seqs + fresh
        g.joining = []
        if self.cfg.record_timings:
            self._sync()
        return {"kind": "prefill", "rows": len(fresh), "kv": 0, "new": len(fresh) * p, "width": p}

    def _decode(self, g: _Group) -> dict:
        active = [not s.idle for s in g.seqs]
        act = torch.tensor(active, device=self.device)
        ids = torch.where(act, g.last, torch.full_like(g.last, self.cfg.pad_token_id))
        width = max(len(s.context) for s in g.seqs)
        tok, lp = self._dec(g).decode(len(g.seqs), ids, [s.seed for s in g.seqs], [len(s.context) - 1 for s in g.seqs])
        tok = self._book(tok, lp, g.seqs, active)
        g.last = torch.where(act, tok, g.last)
        return {"kind": "decode", "rows": len(g.seqs), "kv": len(g.seqs) * width, "new": 0, "width": width}

    def _keep_rows(self, g: _Group, keep: list[int]) -> None:
        """Keep rows ``keep`` of the group, in order: their KV moves down to slots ``0..len(keep)-1``."""
        if g.last is not None and keep and keep != list(range(len(keep))):
            self._dec(g).move(keep, list(range(len(keep))), max(len(g.seqs[i].context) for i in keep))
        g.last = g.last.index_select(0, torch.tensor(keep, device=g.last.device)) if g.last is not None and keep else None
        g.seqs = [g.seqs[i] for i in keep]



def static_actor(cfg: TorchStaticConfig, backend: str = "torch-static", max_num_seqs: int = 256, cuda_graphs: bool = True,
                 kv_cache_bytes: int | None = None):
    """The static decoder a backend name stands for: `TorchStaticActor` (``torch-static``) or
    `TorchStaticGraphActor` (``torch-static-graph``; the other arguments are its)."""
    if backend == "torch-static-graph":
        return TorchStaticGraphActor(cfg, max_num_seqs=max_num_seqs, cuda_graphs=cuda_graphs, kv_cache_bytes=kv_cache_bytes)
    if backend != "torch-static":
        raise ConfigError(f"not a static decoder backend: {backend!r} (torch-static, torch-static-graph)")
    return TorchStaticActor(cfg)
