import subprocess
import sys


def test_help_is_fast_and_light():
    # `--help` must not import heavy libraries: they are loaded inside the commands.
    code = (
        "import sys; from kvbench.cli import app; "
        "heavy = {'torch', 'transformers', 'numpy', 'aiohttp', 'plotly', 'pydantic', "
        "'prometheus_client'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    res = subprocess.run([sys.executable, "-m", "kvbench", "--help"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert "kvbench" in res.stdout
