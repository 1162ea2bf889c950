"""Write a Trellis environment in Python: the JSON-lines form the "subprocess"
environment runs (docs/environment-protocol.md).

    from trellis_verifier.environment import Environment, StepResult

    class Echo(Environment):
        def open(self, episode_id, prompt, answer, metadata, seed):
            return "say it"
        def step(self, episode_id, action, turn):
            return StepResult(observation="", reward=1.0, done=True)

    Echo().serve()

A method's exception becomes that call's {"error": ...} answer, so one bad
episode does not end the process.
"""
import dataclasses
import json
import math
import sys
from typing import Any, Dict, List, Optional


@dataclasses.dataclass
class Tool:
    name: str
    description: str = ""


@dataclasses.dataclass
class Observation:
    """What open() returns: the text before the first turn and the tools."""
    observation: str = ""
    tools: List[Tool] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class StepResult:
    """What step() returns."""
    observation: str = ""
    reward: float = 0.0
    done: bool = False
    metadata: Optional[Dict[str, Any]] = None


class Environment:
    """Subclass and implement open and step (close is optional)."""

    def open(self, episode_id: str, prompt: str, answer: str, metadata: Dict[str, Any],
             seed: int):
        """Starts an episode; returns an Observation or a str."""
        raise NotImplementedError

    def step(self, episode_id: str, action: str, turn: int) -> StepResult:
        """Takes the policy's action; returns a StepResult."""
        raise NotImplementedError

    def close(self, episode_id: str) -> None:
        """Ends an episode (done or not); frees what it held."""

    def handle(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """The answer to one request (a decoded line), "id" echoed."""
        answer: Dict[str, Any]
        try:
            answer = self._dispatch(request)
        except Exception as e:  # noqa: BLE001 - the call fails, not the process
            answer = {"error": f"{type(e).__name__}: {e}"}
        if "id" in request:
            answer["id"] = request["id"]
        return answer

    def serve(self, stdin=None, stdout=None) -> None:
        """Answers requests, one JSON object per line, until stdin ends."""
        stdin = stdin if stdin is not None else sys.stdin
        stdout = stdout if stdout is not None else sys.stdout
        for line in stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except json.JSONDecodeError as e:
                answer = {"error": f"request is not JSON: {e}"}
            else:
                answer = self.handle(request)
            stdout.write(json.dumps(answer, allow_nan=False) + "\n")
            stdout.flush()

    def _dispatch(self, request: Dict[str, Any]) -> Dict[str, Any]:
        verb = request.get("verb")
        episode_id = request["episode_id"]
        if verb == "open":
            opened = self.open(episode_id, request.get("prompt", ""), request.get("answer", ""),
                               request.get("metadata") or {}, int(request.get("seed", 0)))
            if isinstance(opened, str):
                opened = Observation(opened)
            return {"observation": opened.observation,
                    "tools": [{"name": t.name, "description": t.description}
                              for t in opened.tools]}
        if verb == "step":
            r = self.step(episode_id, request["action"], int(request.get("turn", 0)))
            reward = float(r.reward)
            if not math.isfinite(reward):
                raise ValueError(f"reward must be finite, found {reward}")
            answer = {"observation": r.observation, "reward": reward, "done": bool(r.done)}
            if r.metadata is not None:
                answer["metadata"] = r.metadata
            return answer
        if verb == "close":
            self.close(episode_id)
            return {}
        raise ValueError(f"unknown verb {verb!r}")
