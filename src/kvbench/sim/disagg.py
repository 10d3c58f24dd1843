"""Prefill/decode disaggregation: prefill ranks and decode ranks with their own pools, the
prompt's KV moved from one to the other over the scale-out network.

A request is routed to a prefill rank (the job's router, on its session key), where the
prefix cache (and host tier, if any) lives: it runs there as a prefill-only request. When
its prefill ends, its KV (every prompt token, the rank's share of each) is sent over that
rank's NIC (one queue per prefill rank: transfers wait for the ones before them) to the
decode rank with the fewest requests; the decode rank reserves the prompt and output
tokens in its own pool (no prefix reuse there), produces the first token in its next step
and decodes the rest. TTFT runs from the send to that first decode token; hit rates are
the prefill rank's."""

from __future__ import annotations

import math
from collections.abc import Callable

from kvbench.sim.engine import Engine
from kvbench.sim.link import HostLink
from kvbench.sim.ranks import RankedEngines, Router, kv_cost, session_key, side_by_side
from kvbench.sim.request import SimRequest


class DisaggEngines(RankedEngines):
    """Looks like one `Engine` to the lane driver; `engines` are the prefill ranks, then
    the decode ranks."""

    def __init__(self, make_prefill: Callable[..., Engine], prefill_ranks: int,
                 make_decode: Callable[..., Engine], decode_ranks: int, router: str,
                 transfer_bytes_per_token: float, transfer_bytes_per_s: float,
                 on_finish: Callable[[SimRequest], None] | None = None,
                 on_arrival: Callable[[SimRequest], bool] | None = None) -> None:
        self.router = Router(router, prefill_ranks)
        self.on_finish = on_finish
        self.now_s = 0.0
        self.prefill = [make_prefill(on_finish=self._prefilled(i), on_arrival=on_arrival)
                        for i in range(prefill_ranks)]
        self.decode = [make_decode(on_finish=self._decoded(i)) for i in range(decode_ranks)]
        self.engines = self.prefill + self.decode
        side_by_side(self.engines, self.router)
        self._touched: set[int] = set()
        self.nics = [HostLink(transfer_bytes_per_token, math.inf, transfer_bytes_per_s)
                     for _ in range(prefill_ranks)]
        self.transferred_tokens = 0

    def _load(self, rank: int) -> int:
        e = self.prefill[rank]
        return e.num_running + e.num_queued

    def submit(self, req: SimRequest, at_s: float | None = None) -> None:
        load = self._load if self.router.policy != "kv" else kv_cost(self.prefill, req)
        rank = self.router.route(session_key(req), load)
        full_output = req.output_tokens
        req.meta = {**(req.meta or {}), "rank": rank, "output_tokens": full_output}
        req.output_tokens = 1  # the prefill rank computes the prompt (and one token)
        self.prefill[rank].submit(req, at_s)
        self._touched.add(rank)

    def _prefilled(self, rank: int) -> Callable[[SimRequest], None]:
        def done(req: SimRequest) -> None:
            now = self.now_s = self._fired(self.prefill[rank])
            if req.error is not None:
                req.output_tokens = req.meta["output_tokens"]
                if self.on_finish is not None:
                    self.on_finish(req)
                return
            nic = self.nics[rank]
            nic.now_s = now
            self.transferred_tokens += req.input_tokens
            at = now + nic.sync_d2h_s(req.input_tokens)
            d = SimRequest(rid=req.rid, arrival_s=at, input_tokens=req.input_tokens,
                           output_tokens=req.meta["output_tokens"], keys=[],
                           page_tokens=req.page_tokens, session=req.session,
                           prefilled_tokens=req.input_tokens)
            # the wait behind this NIC's earlier transfers plus this one's own bytes
            d.meta = {**req.meta, "sent_s": req.arrival_s, "prefill": req,
                      "kv_transfer_s": at - now}
            target = self._least_loaded_decode()
            self.decode[target].submit(d, at)
            self._touched.add(len(self.prefill) + target)
        return done

    def _least_loaded_decode(self) -> int:
        """The decode rank with the fewest requests running, queued or on their way (the
        lowest on a tie): a plain loop, as this runs once per request over every rank."""
        best, best_load = 0, -1
        for i, e in enumerate(self.decode):
            load = e.num_running + e.num_queued
            if best_load < 0 or load < best_load:
                best, best_load = i, load
        return best

    def _decoded(self, rank: int) -> Callable[[SimRequest], None]:
        def done(req: SimRequest) -> None:
            self.now_s = self._fired(self.decode[rank])
            p = req.meta.pop("prefill")
            # the record the client sees: sent at the prefill arrival, hits of the prefill
            req.meta["kv_arrival_s"] = req.arrival_s
            req.arrival_s = req.meta["sent_s"]
            req.admit_s = p.admit_s
            req.device_hit_tokens, req.host_hit_tokens = p.device_hit_tokens, p.host_hit_tokens
            req.meta["decode_rank"] = rank
            if self.on_finish is not None:
                self.on_finish(req)
        return done
