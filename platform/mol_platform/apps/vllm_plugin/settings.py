"""The resolver plugin's settings, read from the engine's environment (``MOL_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_CACHE_BYTES = 10 * 1024**3


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "mol-platform" / "adapters"


class ResolverSettings(BaseSettings):
    """``MOL_CATALOG_URL`` unset means the resolver is off (the engine serves only what
    it was started with) and, unless ``MOL_COUNT_ADAPTER_LOADS`` is set, the plugin does
    nothing: the same engine install then behaves exactly like plain vLLM."""

    model_config = SettingsConfigDict(env_prefix="MOL_", extra="ignore")

    catalog_url: str | None = None
    catalog_token: str | None = None
    serving_profile: str | None = None
    adapter_cache_dir: Path = Field(default_factory=default_cache_dir)
    adapter_cache_bytes: int = Field(default=DEFAULT_CACHE_BYTES, gt=0)
    # Seconds for one catalog call (downloads stream with the same idle timeout).
    catalog_timeout: float = Field(default=30.0, gt=0)
    # Load only adapters whose model-signing signature verifies (also when the serving
    # profile says so); MOL_TRUSTED_SIGNERS: comma-separated key ids accepted (empty: the
    # key the catalog names).
    require_signatures: bool = False
    trusted_signers: str = ""
    # Count adapter loads in the engine (``mol_engine_adapter_loads_total``: loads.py);
    # on for every engine the platform starts, independent of the catalog URL.
    count_adapter_loads: bool = False

    @property
    def trusted_keys(self) -> frozenset[str]:
        return frozenset(k.strip() for k in self.trusted_signers.split(",") if k.strip())
