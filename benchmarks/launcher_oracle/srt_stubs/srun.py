"""The srun recorder of record_srt.py: appends {"argv": ...} to $ORACLE_DIR/srun.jsonl."""

import json
import os
import signal
import sys
import time

argv = sys.argv[1:]
with open(os.path.join(os.environ["ORACLE_DIR"], "srun.jsonl"), "a") as f:
    f.write(json.dumps({"argv": argv}) + "\n")
text = " ".join(argv)
if "--container-image" not in argv or "agentic_srt.sh" in text:
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(600)
