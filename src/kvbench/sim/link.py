"""The host link, one queue per direction (PCIe and NVLink-C2C are full duplex: loads
host -> device never wait for backups device -> host, but each direction is one pipe).

- H2D: load-backs. A step's loads start when the loads before them have finished.
- D2H: backups. Write-through backups are asynchronous: they queue on the link and a copy
  is on the host only when its transfer ends (`async_d2h` returns that time); a write-back
  copy made while evicting is on the step's critical path and waits behind the queue.

Times are simulated seconds; the engine sets `now_s` before it composes each step."""

from __future__ import annotations


class HostLink:
    __slots__ = ("d2h_busy_s", "d2h_bytes_per_s", "d2h_until_s", "h2d_busy_s",
                 "h2d_bytes_per_s", "h2d_until_s", "kv_bytes_per_token", "load_fixed_s",
                 "now_s")

    def __init__(self, kv_bytes_per_token: float, h2d_bytes_per_s: float,
                 d2h_bytes_per_s: float, load_fixed_s: float = 0.0) -> None:
        self.kv_bytes_per_token = kv_bytes_per_token
        self.h2d_bytes_per_s = h2d_bytes_per_s
        self.d2h_bytes_per_s = d2h_bytes_per_s
        self.load_fixed_s = load_fixed_s
        self.now_s = 0.0
        self.h2d_until_s = 0.0  # when the queued transfers of each direction end
        self.d2h_until_s = 0.0
        self.h2d_busy_s = 0.0  # total transfer time (utilisation = busy / span)
        self.d2h_busy_s = 0.0

    @classmethod
    def for_costs(cls, costs) -> HostLink:
        return cls(costs.kv_bytes_per_token_per_rank, costs.h2d_bytes_per_s,
                   costs.d2h_bytes_per_s, costs.load_fixed_s)

    def load_s(self, tokens: int) -> float:
        """Seconds from now until `tokens` loaded now are on the device (queue wait +
        fixed cost + transfer); the H2D queue advances."""
        if tokens <= 0:
            return 0.0
        t = tokens * self.kv_bytes_per_token / self.h2d_bytes_per_s + self.load_fixed_s
        start = max(self.now_s, self.h2d_until_s)
        self.h2d_until_s = start + t
        self.h2d_busy_s += t
        return self.h2d_until_s - self.now_s

    def async_d2h(self, tokens: int) -> float:
        """Queue an asynchronous backup; returns when the host copy is complete."""
        t = tokens * self.kv_bytes_per_token / self.d2h_bytes_per_s
        start = self.now_s  # the later of now and the queue's end (a store per chunk)
        if self.d2h_until_s > start:
            start = self.d2h_until_s
        self.d2h_until_s = start + t
        self.d2h_busy_s += t
        return self.d2h_until_s

    def sync_d2h_s(self, tokens: int) -> float:
        """Seconds from now until a copy made now on the critical path is done."""
        if tokens <= 0:
            return 0.0
        return self.async_d2h(tokens) - self.now_s

    def summary(self, span_s: float) -> dict:
        return {"h2d_busy_s": self.h2d_busy_s, "d2h_busy_s": self.d2h_busy_s,
                "h2d_utilisation": self.h2d_busy_s / span_s if span_s > 0 else 0.0,
                "d2h_utilisation": self.d2h_busy_s / span_s if span_s > 0 else 0.0}
