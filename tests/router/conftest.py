"""Router test helpers: a router in the test's event loop in front of simulated
engines (mol_testkit.simulator) or tiny scripted upstreams on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from mol_platform.contract.router_config import RouterConfig
from mol_router.server import RouterServer
from mol_router.settings import RouterSettings

SIM_MODEL = "tiny"


def make_config(endpoints: list[str], **overrides: Any) -> RouterConfig:
    """Two experts (chat, coding) on immutable names; no catalog unless given."""
    data: dict[str, Any] = {
        "deployment": "demo", "profile": "default.demo", "base_model": SIM_MODEL,
        "experts": [
            {"name": "chat", "adapter": "demo/chat@v1", "description": "small talk"},
            {"name": "coding", "adapter": "demo/coding@v1", "description": "writes code"},
        ],
        "default": "chat", "endpoints": endpoints,
        "scrape_interval_seconds": 0.2,
    }
    data.update(overrides)
    return RouterConfig.model_validate(data)


def write_config(path: Path, cfg: RouterConfig) -> None:
    path.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))


@asynccontextmanager
async def running_router(cfg: RouterConfig, tmp_path: Path,
                         **settings: Any) -> AsyncIterator[RouterServer]:
    """The router on a free loopback port, its config written to ``tmp_path``; waits
    until an engine is ready unless the config's endpoints are all down."""
    path = tmp_path / "router.yaml"
    write_config(path, cfg)
    values: dict[str, Any] = {"config": path, "host": "127.0.0.1", "port": 0,
                              "reload_interval": 0.1}
    values.update(settings)
    server = RouterServer(RouterSettings(**values))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def router_config() -> Any:
    """``router_config(endpoints, **overrides) -> RouterConfig``."""
    return make_config


@pytest.fixture
def start_router(tmp_path: Path) -> Any:
    """``async with start_router(cfg, **settings) as server`` (see running_router)."""

    def start(cfg: RouterConfig, **settings: Any) -> Any:
        return running_router(cfg, tmp_path, **settings)

    return start


async def wait_ready(server: RouterServer, count: int = 1, within: float = 10.0) -> None:
    tracker = server.runtime.tracker
    assert tracker is not None
    deadline = asyncio.get_running_loop().time() + within
    while len(tracker.ready_endpoints()) < count:
        assert asyncio.get_running_loop().time() < deadline, "engines never became ready"
        await asyncio.sleep(0.02)


@pytest.fixture
def ready() -> Any:
    """``await ready(server, count=1)``: until ``count`` engines pass a health check."""
    return wait_ready
