"""Tools in the environment contract: environments whose model calls functions before it answers.

    from proctor.envs.tools import ToolEnv, PythonTool, ToolLimits
    env = ToolEnv(source, verifier, tools=[PythonTool(), my_function], limits=ToolLimits(max_turns=4))

Tools are OpenAI-style function schemas (``schema.py``), rendered by the chat template
(``apply_chat_template(tools=env.tool_schemas())``); a model's calls are read by a parser per
model family (``parsers.py``: Hermes/Qwen ``<tool_call>`` blocks, OpenAI JSON); an episode
runs them under limits and counts what went wrong (``episode.py``); ``ToolEnv`` is the
Gymnasium env (``env.py``). Built in: ``python`` (a sandbox session per episode,
``python.py``) and ``run_tests`` (``proctor.envs.code.agent``).
"""

from .env import ToolEnv, is_tool_env
from .episode import ERROR_KINDS, ToolEpisode, ToolLimits, ToolStats, ToolStep, tool_message
from .parsers import (HermesParser, OpenAIJsonParser, ParsedReply, ToolCall, ToolCallParser, get_parser,
                      register_parser)
from .python import PythonTool
from .schema import FunctionTool, Tool, ToolContext, ToolOutput, as_tool, check_arguments, function_schema

__all__ = [
    "ToolEnv", "is_tool_env", "ERROR_KINDS", "ToolEpisode", "ToolLimits", "ToolStats", "ToolStep", "tool_message",
    "HermesParser", "OpenAIJsonParser", "ParsedReply", "ToolCall", "ToolCallParser", "get_parser", "register_parser",
    "PythonTool", "FunctionTool", "Tool", "ToolContext", "ToolOutput", "as_tool", "check_arguments",
    "function_schema",
]
