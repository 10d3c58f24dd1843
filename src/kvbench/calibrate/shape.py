"""The shape of one dense transformer layer, from a model profile or from plain numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvbench.errors import CalibrateError

_FLAGS = {"num_attention_heads": "--num-heads"}
SHAPE_FIELDS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
    "intermediate_size", "vocab_size",
)


@dataclass(frozen=True, slots=True)
class LayerShape:
    """A GQA attention + SwiGLU MLP layer (Llama/Qwen3 family)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int = 0

    def __post_init__(self) -> None:
        for field in SHAPE_FIELDS:
            value = getattr(self, field)
            if value < (0 if field == "vocab_size" else 1):
                raise CalibrateError(f"layer shape {field} must be >= 1, got {value}")
        if self.num_attention_heads % self.num_kv_heads:
            raise CalibrateError(
                f"layer shape num_attention_heads ({self.num_attention_heads}) must be a "
                f"multiple of num_kv_heads ({self.num_kv_heads})"
            )

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def params(self) -> int:
        """Weights of one layer (norms included)."""
        attn = self.hidden_size * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        return attn + mlp + 2 * self.hidden_size + 2 * self.head_dim

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V of one token in this one layer."""
        return 2 * self.kv_dim * dtype_bytes

    def linear_flops(self, tokens: int) -> float:
        """Matmul FLOPs of `tokens` tokens through the layer's projections."""
        macs = self.hidden_size * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden_size
        macs += 3 * self.hidden_size * self.intermediate_size
        return 2.0 * tokens * macs

    def attention_flops(self, batch: int, new_tokens: int, context_tokens: int) -> float:
        """QK^T and PV FLOPs: each new token attends to the context before it (causal)."""
        earlier = context_tokens - new_tokens
        # token i of the new ones sees earlier + i + 1 keys
        pairs = new_tokens * earlier + new_tokens * (new_tokens + 1) / 2
        return 4.0 * batch * self.num_attention_heads * self.head_dim * pairs

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in asdict(self).items() if k != "name"}


def shape_from_model(profile: Any, intermediate_size: int | None = None) -> LayerShape:
    """Read a `kvbench.models.ModelProfile` (duck-typed). The contract has no intermediate
    size, so it is taken from the profile when present, else solved from `active_params`."""
    hidden = profile.hidden_size
    inter = intermediate_size or getattr(profile, "intermediate_size", None)
    if not inter:
        attn = hidden * (profile.num_attention_heads + profile.num_kv_heads) * profile.head_dim * 2
        embed = 2 * profile.vocab_size * hidden
        per_layer = (profile.active_params - embed) / profile.num_layers - attn
        inter = int(round(per_layer / (3 * hidden) / 128) * 128)
        if inter < 1:
            raise CalibrateError(
                f"model {profile.name}: cannot derive intermediate_size from active_params",
                hint="pass --intermediate-size",
            )
    return LayerShape(
        name=profile.name,
        num_layers=profile.num_layers,
        hidden_size=hidden,
        num_attention_heads=profile.num_attention_heads,
        num_kv_heads=profile.num_kv_heads,
        head_dim=profile.head_dim,
        intermediate_size=int(inter),
        vocab_size=profile.vocab_size,
    )


def resolve_shape(model: str | None, overrides: dict[str, int | None]) -> LayerShape | None:
    """The shape from `kvbench.models.load_model(model)` and/or explicit numbers (which win).
    None when neither is given: calibrate then skips the per-model measurements."""
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - set(SHAPE_FIELDS)
    if unknown:
        raise CalibrateError(f"unknown shape fields {sorted(unknown)}; known: {SHAPE_FIELDS}")
    if model is None and not given:
        return None
    base: dict[str, Any] = {"name": model or "custom", "vocab_size": 0}
    if model is not None:
        try:
            from kvbench.models import load_model
        except ImportError as e:
            raise CalibrateError(
                f"model profiles are not available in this build ({e})",
                hint="give the shape with --num-layers --hidden-size --num-heads "
                "--num-kv-heads --head-dim --intermediate-size",
            ) from e
        profile = load_model(model)
        inter = given.get("intermediate_size")
        base = {"name": profile.name, **shape_from_model(profile, inter).as_dict()}
    base.update(given)
    missing = [f for f in SHAPE_FIELDS if f not in base]
    if missing:
        flags = ", ".join(_FLAGS.get(f, "--" + f.replace("_", "-")) for f in missing)
        raise CalibrateError(
            f"layer shape is missing {', '.join(missing)}",
            hint=f"pass --model NAME or all of {flags}",
        )
    return LayerShape(**base)
