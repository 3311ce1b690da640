"""A fake vLLM engine for tests: OpenAI API, LoRA slots, vLLM's metrics, scripting.

Router, operator and chart tests run it instead of a real engine. See
docs/simulator.md. Typical use::

    from mol_testkit.simulator import SimConfig, SimulatorCluster

    with SimulatorCluster(replicas=2, config=SimConfig(dynamic_loras=True)) as sims:
        sims.urls  # ["http://127.0.0.1:PORT", ...]
"""

from mol_testkit.simulator.cluster import AsyncSimulatorCluster, SimulatorCluster
from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.model import ReceivedRequest, ReplicaState
from mol_testkit.simulator.scripting import FailureSpec, ScriptRule, ToolCallSpec
from mol_testkit.simulator.server import SimServer
from mol_testkit.simulator.shapes import REPLICA_HEADER
from mol_testkit.simulator.sse import newest_lora_info, parse_sse
from mol_testkit.simulator.textgen import (
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
