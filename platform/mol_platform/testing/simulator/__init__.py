"""A fake vLLM engine for tests: OpenAI API, LoRA slots, vLLM's metrics, scripting.

Router, operator and chart tests run it instead of a real engine. See
docs/simulator.md. Typical use::

    from mol_platform.testing.simulator import SimConfig, SimulatorCluster

    with SimulatorCluster(replicas=2, config=SimConfig(dynamic_loras=True)) as sims:
        sims.urls  # ["http://127.0.0.1:PORT", ...]
"""

from mol_platform.testing.simulator.cluster import AsyncSimulatorCluster, SimulatorCluster
from mol_platform.testing.simulator.config import SimConfig
from mol_platform.testing.simulator.model import ReceivedRequest, ReplicaState
from mol_platform.testing.simulator.scripting import FailureSpec, ScriptRule, ToolCallSpec
from mol_platform.testing.simulator.server import SimServer
from mol_platform.testing.simulator.shapes import REPLICA_HEADER
from mol_platform.testing.simulator.sse import newest_lora_info, parse_sse
from mol_platform.testing.simulator.textgen import (
    chat_prompt,
    completion_prompt,
    reply_text,
    reply_words,
)

__all__ = [
    "REPLICA_HEADER",
    "AsyncSimulatorCluster",
    "FailureSpec",
    "ReceivedRequest",
    "ReplicaState",
    "ScriptRule",
    "SimConfig",
    "SimServer",
    "SimulatorCluster",
    "ToolCallSpec",
    "chat_prompt",
    "completion_prompt",
    "newest_lora_info",
    "parse_sse",
    "reply_text",
    "reply_words",
]
