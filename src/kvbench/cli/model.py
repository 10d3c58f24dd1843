"""`kvbench dummy-model`: a model directory to serve with random weights."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.app import app


@app.command("dummy-model")
def dummy_model(
    out: Annotated[Path, typer.Argument(help="Directory to write (config.json + tokenizer).")],
    model: Annotated[str, typer.Option(
        "--model", help="A shipped architecture (deepseek-v3-scaled, qwen3-8b, "
        "qwen3.5-397b-a17b-scaled).")
    ] = "qwen3-8b",
    config: Annotated[Path | None, typer.Option(
        "--config", help="A model's config.json instead of a shipped one.")] = None,
    max_position_embeddings: Annotated[int | None, typer.Option(
        "--max-position-embeddings", min=1,
        help="Override the context length the config allows.")] = None,
) -> None:
    """Write a model directory an engine serves with `--load-format dummy`: the architecture's
    config.json and a local tokenizer whose vocabulary equals its vocab_size (built offline).
    Use it with `kvbench run --load-format dummy --model-path DIR`."""
    import json

    from kvbench.errors import ModelError
    from kvbench.models.dummy import build_dummy_model, shipped_config, shipped_processor

    if config is not None:
        try:
            cfg, source = json.loads(config.read_text()), str(config)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelError(f"--config {config}: cannot read a config.json: {e}") from None
    else:
        cfg, source = shipped_config(model), f"kvbench shipped config {model}"
    path = build_dummy_model(out, cfg, max_position_embeddings=max_position_embeddings,
                             source=source,
                             extra_files=shipped_processor(model) if config is None else None)
    print(path)
