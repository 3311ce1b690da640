"""The MoL LoRA resolver plugin for vLLM (entry-point group ``vllm.general_plugins``).

vLLM calls :func:`register` in each of its processes at startup. With
``MOL_COUNT_ADAPTER_LOADS`` set (every engine the platform starts) it counts adapter
loads where the worker makes them (:mod:`mol_platform.apps.vllm_plugin.loads`). With
``MOL_CATALOG_URL`` set it registers a resolver that vLLM asks for adapter names it
does not know (only with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); see
:mod:`mol_platform.apps.vllm_plugin.resolver`. With neither it does nothing but log one
line, so an engine install shared with plain-vLLM engines behaves exactly as without
the plugin. vLLM is imported here and only here, lazily: the rest of the plugin is
tested without it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mol_platform.apps.vllm_plugin.settings import ResolverSettings

RESOLVER_NAME = "mol-catalog"

log = logging.getLogger("vllm.mol_platform")


def register() -> None:
    """Count adapter loads (``MOL_COUNT_ADAPTER_LOADS``) and register the resolver with
    vLLM (``MOL_CATALOG_URL``); each a no-op without its setting. Never raises."""
    from mol_platform.apps.vllm_plugin.settings import ResolverSettings

    try:
        settings = ResolverSettings()
    except Exception:  # a broken plugin must not take the engine down
        log.exception("MoL plugin: bad settings; not registered")
        return
    if settings.count_adapter_loads:
        try:
            _count_loads()
        except Exception:
            log.exception("MoL plugin: adapter loads not counted")
    try:
        _register(settings)
    except Exception:
        log.exception("MoL resolver: not registered")


def _count_loads() -> None:
    from vllm.lora.model_manager import LoRAModelManager  # type: ignore[import-not-found]
    from vllm.lora.worker_manager import WorkerLoRAManager  # type: ignore[import-not-found]

    from mol_platform.apps.vllm_plugin.loads import install

    install(LoRAModelManager, WorkerLoRAManager)


def _register(settings: ResolverSettings) -> None:
    if not settings.catalog_url:
        log.info("MoL resolver: MOL_CATALOG_URL is not set; not registering (plain vLLM)")
        return

    from vllm.lora.request import LoRARequest  # type: ignore[import-not-found]
    from vllm.lora.resolver import (  # type: ignore[import-not-found]
        LoRAResolver,
        LoRAResolverRegistry,
    )

    from mol_platform.apps.vllm_plugin.resolver import MolResolver

    if RESOLVER_NAME in LoRAResolverRegistry.get_supported_resolvers():
        return  # vLLM loads general plugins more than once in some processes
    resolver = MolResolver(settings)

    class MolCatalogResolver(LoRAResolver):  # type: ignore[misc]
        """Adapters by immutable name from the MoL catalog, cached by digest."""

        async def resolve_lora(self, base_model_name: str, lora_name: str) -> Any:
            found = await resolver.resolve(lora_name)
            if found is None:
                return None
            try:
                return LoRARequest(lora_name=found.name, lora_int_id=found.lora_id,
                                   lora_path=str(found.path), base_model_name=base_model_name)
            except Exception:
                log.exception("MoL resolver: cannot build the LoRA request for %r", lora_name)
                return None

    LoRAResolverRegistry.register_resolver(RESOLVER_NAME, MolCatalogResolver())
    log.info("MoL resolver: registered (catalog %s, profile %s, cache %s, %d bytes)",
             settings.catalog_url, settings.serving_profile or "(none: no compatibility check)",
             settings.adapter_cache_dir, settings.adapter_cache_bytes)
