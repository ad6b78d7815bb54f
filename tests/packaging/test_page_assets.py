"""Every file the quota page serves ships in the wheel (the vendored chart library too: the
page must work offline, with no CDN)."""

from __future__ import annotations

from airflow_llm_router.plugins import page
from tests.packaging.test_wheel import wheel_files  # noqa: F401 (the fixture)


def test_the_wheel_carries_every_page_asset(wheel_files: list[str]) -> None:  # noqa: F811
    static = "airflow_llm_router/plugins/static/"
    assert "vendor/uPlot.iife.min.js" in page._ASSETS
    missing = [name for name in [*page._ASSETS, "index.html"]
               if static + name not in wheel_files]
    assert missing == []
