"""The typer application object; command modules attach themselves to it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="kvbench",
    help="Plan, run and explain agentic LLM-inference benchmarks with KV-cache offload.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.command()
def version() -> None:
    """Print kvbench's version and result-schema version."""
    from kvbench import SCHEMA_VERSION, __version__

    print(f"kvbench {__version__} (schema {SCHEMA_VERSION})")
