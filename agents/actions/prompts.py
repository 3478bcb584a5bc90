"""Tool prompts as lagent writes them (``lagent.agents.stream``): same text, same JSON."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from agents.actions.base import BaseAction

API_PREFIX = (
    "This is the subfunction for tool '{tool_name}', you can use this tool. "
    "The description of this function is: \n{description}"
)
META_CN = "当开启工具以及代码时，根据需求选择合适的工具进行调用"
INTERPRETER_CN = (
    "你现在已经能够在一个有状态的 Jupyter 笔记本环境中运行 Python 代码。"
    "当你向 python 发送含有 Python 代码的消息时，它将在该环境中执行。"
    "这个工具适用于多种场景，如数据分析或处理（包括数据操作、统计分析、图表绘制），"
    "复杂的计算问题（解决数学和物理难题），编程示例（理解编程概念或特性），"
    "文本处理和分析（比如文本解析和自然语言处理），"
    "机器学习和数据科学（用于展示模型训练和数据可视化），"
    "以及文件操作和数据导入（处理CSV、JSON等格式的文件）。"
)
PLUGIN_CN = (
    "你可以使用如下工具："
    "\n{prompt}\n"
    "如果你已经获得足够信息，请直接给出答案. 避免不必要的工具调用! "
    "同时注意你可以使用的工具，不要随意捏造！"
)


def get_plugin_prompt(
    actions: BaseAction | Iterable[BaseAction], api_desc_template: str = API_PREFIX
) -> str:
    """The JSON list of tool descriptions lagent puts in plugin prompts (required args only)."""
    items = [actions] if isinstance(actions, BaseAction) else list(actions)
    descriptions: list[dict[str, Any]] = []
    for action in items:
        desc = copy.deepcopy(action.description)
        apis = desc["api_list"] if action.is_toolkit else [desc]
        for api in apis:
            if action.is_toolkit:
                api["name"] = f"{action.name}.{api['name']}"
            api["description"] = api_desc_template.format(
                tool_name=action.name, description=api["description"]
            )
            api["parameters"] = [p for p in api["parameters"] if p["name"] in api["required"]]
            descriptions.append(api)
    return json.dumps(descriptions, ensure_ascii=False, indent=4)
