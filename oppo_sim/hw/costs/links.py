"""Which link a group of GPUs communicates over, and at what bandwidth: the one rule the trainer's collectives,
the weight export and the engines' tensor-parallel all-reduces apply (``gpu_table.domain_gpus`` says which GPUs
share a scale-up domain).

A group of ``span`` consecutive ranks of a pool runs over the scale-up link (``link_bw``: NVLink, Infinity Fabric,
PCIe peer-to-peer) when it fits in one scale-up domain, and crosses the network when it is larger than a domain or
is the whole of a pool that spans domains. Across the network the bandwidth depends on the collective:

- **Point-to-point** traffic (pipeline sends, the context-parallel ring's exchange): a GPU at a node's edge sends
  through its own NIC, ``net_bw`` (:func:`group_bw`).
- **All-to-all** traffic (expert dispatch and combine, Ulysses): of the ``(n - 1) / n`` of its bytes a GPU sends to
  the others, the share bound for the ``n - k`` GPUs on other nodes leaves through its own NIC while the share for
  the ``k - 1`` beside it crosses the scale-up link at the same time; the slower of the two sets the pace
  (:func:`alltoall_bw`, per byte sent).
- **Ring collectives** (all-reduce, all-gather, reduce-scatter, broadcast): NCCL lays its rings through the GPUs
  of a node over the scale-up link and crosses to the next node once per ring, each of its channels through
  another NIC (one NIC per GPU on the rail-optimised clusters of the GPU table). A channel carries ``1 / C`` of
  the data, so the node's NICs carry the channels side by side and a rank's bus bandwidth is the NICs of the
  group's GPUs in a domain together, at most the scale-up link: ``min(link_bw, k · net_bw)`` for ``k`` of the
  group's GPUs in each domain (:func:`ring_bw`). nccl-tests' all-reduce across nodes of 8 H100 with one
  400 Gb/s NIC each (50 GB/s) reaches a bus bandwidth of about 400-450 GB/s, not the 50 GB/s of one NIC. Several
  groups that share a domain's NICs at the same time (the data-parallel groups of a tensor-parallel layout, one
  per TP rank) each get their members' NICs: a group strided by ``s`` ranks has ``domain / s`` GPUs in a domain.
  A group with one GPU in a domain (one rank a node, or a broadcast's root alone on its node) gets that GPU's NIC.
"""

from __future__ import annotations

from oppo_sim.hw.devices.hardware import nodes_spanned

__all__ = ["alltoall_bw", "alltoall_share", "crosses", "group_bw", "group_nodes", "ring_bw", "ring_share"]


def crosses(cost, span: int, devices: int) -> bool:
    """Whether a group of ``span`` consecutive ranks of a ``devices``-GPU pool priced by ``cost`` (a ``CostModel``:
    its ``domain`` and ``cross_node``) leaves the scale-up domain: larger than a domain, or the whole pool where
    the pool spans domains."""
    return (span >= devices and cost.cross_node and span > 1) or (cost.domain > 0 and span > cost.domain)


def group_bw(cost, span: int, devices: int) -> float:
    """Bandwidth of point-to-point traffic in a group of ``span`` consecutive ranks of a ``devices``-GPU pool:
    ``net_bw`` where the group crosses the network, else the scale-up link."""
    g = cost.hw.gpu
    return g.net_bw if crosses(cost, span, devices) else g.link_bw


def alltoall_share(link_bw: float, net_bw: float, span: int, per_domain: int) -> float:
    """Bandwidth per byte a GPU sends in an all-to-all over ``span`` ranks with ``per_domain`` of them in its
    scale-up domain: its bytes for other domains over its NIC beside those for its own over the link (module
    notes); ``net_bw`` where the domain holds only itself."""
    if span <= 1:
        return link_bw
    k = max(1, min(int(per_domain), span))
    far, near = (span - k) / (span - 1), (k - 1) / (span - 1)
    return 1.0 / max(far / net_bw, near / link_bw)


def alltoall_bw(cost, span: int, devices: int) -> float:
    """Bandwidth per byte sent of an all-to-all over ``span`` consecutive ranks of a ``devices``-GPU pool: the
    scale-up link inside a domain; across the network, :func:`alltoall_share` with the group's GPUs in a domain."""
    g, here = cost.hw.gpu, _in_domain(cost, span, devices)
    return g.link_bw if here is None else alltoall_share(g.link_bw, g.net_bw, span, here)


def ring_share(link_bw: float, net_bw: float, per_domain: int) -> float:
    """Bus bandwidth of a ring collective across the network with ``per_domain`` of its GPUs in each scale-up
    domain: their NICs together, at most the scale-up link (module notes)."""
    return min(link_bw, max(1, int(per_domain)) * net_bw)


def ring_bw(cost, span: int, devices: int, stride: int = 1) -> float:
    """Bus bandwidth of a ring collective (all-reduce, all-gather, reduce-scatter, broadcast) over a group of
    ``span`` ranks of a ``devices``-GPU pool, every ``stride``-th rank (1: consecutive): the scale-up link inside a
    domain; across the network, the NICs of the group's GPUs in a domain together (:func:`ring_share`)."""
    g, here = cost.hw.gpu, _in_domain(cost, span, devices)
    return g.link_bw if here is None else ring_share(g.link_bw, g.net_bw, here // max(1, stride))


def _in_domain(cost, span: int, devices: int) -> int | None:
    """The group's consecutive GPUs in one scale-up domain where it crosses the network (1 where the GPUs a domain
    are unknown: one NIC, a ring at its slowest link); None inside a domain."""
    if not crosses(cost, span, devices):
        return None
    if cost.domain <= 0:
        return 1
    return min(span, cost.domain, cost.pool_domain_gpus or cost.domain)


def group_nodes(cost, span: int, devices: int) -> int:
    """Scale-up domains a group of ``span`` consecutive ranks spans (as :func:`crosses` decides the link): its
    collectives' latency grows with them (``hardware.collective_latency``)."""
    if span <= 1:
        return 1
    if span >= devices and cost.cross_node:  # the whole pool, which spans domains: at least two
        return max(2, nodes_spanned(span, cost.domain))
    return nodes_spanned(span, cost.domain)
