"""Engine versions read from a container image tag (`lmsysorg/sglang:v0.5.16-cu130`,
`...:nightly-dev-cu13-20260805-211ee642`, `...:dev-nightly-0820`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

_RELEASE = re.compile(r"(?:^|[:\-_/])v?(\d+)\.(\d+)\.(\d+)(?:rc(\d+))?")
_DATE8 = re.compile(r"(20\d{2})(\d{2})(\d{2})")
_MMDD = re.compile(r"nightly-(\d{2})(\d{2})(?:$|[^\d])")
# Nightly tags with only month and day belong to the year of the recipe snapshot.
SNAPSHOT_YEAR = 2026


@dataclass(frozen=True, slots=True)
class ImageVersion:
    image: str
    release: tuple[int, int, int] | None
    nightly: date | None

    @property
    def label(self) -> str:
        if self.release:
            return "v" + ".".join(map(str, self.release))
        if self.nightly:
            return f"nightly {self.nightly.isoformat()}"
        return "unknown version"


def image_version(image: str) -> ImageVersion:
    tag = image.rsplit(":", 1)[-1] if ":" in image else image
    nightly = None
    if "nightly" in tag or "dev" in tag:
        if m := _DATE8.search(tag):
            nightly = _date(int(m[1]), int(m[2]), int(m[3]))
        elif m := _MMDD.search(tag):
            nightly = _date(SNAPSHOT_YEAR, int(m[1]), int(m[2]))
    if nightly is not None:
        return ImageVersion(image, None, nightly)
    if m := _RELEASE.search(tag):
        return ImageVersion(image, (int(m[1]), int(m[2]), int(m[3])), None)
    return ImageVersion(image, None, None)


def _date(y: int, m: int, d: int) -> date | None:
    try:
        return date(y, m, d)
    except ValueError:
        return None
