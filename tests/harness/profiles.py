"""How each real harness CLI is set up, pointed at the fake model server, and run headless.

Owns the per-harness facts the suite needs (docs/harnesses.md, checked against
the real CLIs): where its live tree is under ``AM_LOCAL`` (the built-in
adapter's default), the configuration that points it at ``127.0.0.1``, and the
arguments of one turn and of a turn that resumes the last session.  Config
files that belong to the harness's own state are written into the live tree
in the first container life only: later lives get them from ``syncengine
restore``, like a deployment does.  Files a deployment provides outside the
live trees (opencode's config, the ``$HOME`` link) are written in every life.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import attrs

MODEL = "fake-model"


@attrs.frozen
class Where:
    """The paths of one container life that a profile needs."""

    local: Path  # AM_LOCAL
    home: Path  # the container's $HOME (not durable)
    work: Path  # the project directory the harness runs in (same path in every life)
    url: str  # the fake model server


@attrs.frozen
class Profile:
    """One harness: its adapter, live tree, configuration and turn arguments."""

    name: str  # adapter name and key in versions.toml
    live: str  # the adapter's live tree, relative to AM_LOCAL

    def live_dir(self, w: Where) -> Path:
        return w.local / self.live

    def configure(self, w: Where, first_life: bool) -> None:
        """Write configuration before a turn (in-tree files only in the first life)."""

    def env(self, w: Where) -> dict[str, str]:
        return {}

    def turn(self, prompt: str, resume: bool) -> list[str]:
        raise NotImplementedError


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@attrs.frozen
class Codex(Profile):
    def configure(self, w: Where, first_life: bool) -> None:
        if first_life:
            _write(
                self.live_dir(w) / "config.toml",
                f"""\
model = "{MODEL}"
model_provider = "fake"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "{w.url}/v1"
wire_api = "responses"
env_key = "FAKE_API_KEY"

[analytics]
enabled = false
""",
            )

    def env(self, w: Where) -> dict[str, str]:
        return {"CODEX_HOME": str(self.live_dir(w)), "FAKE_API_KEY": "fake-key"}

    def turn(self, prompt: str, resume: bool) -> list[str]:
        if resume:
            return ["exec", "--skip-git-repo-check", "resume", "--last", prompt]
        return ["exec", "--skip-git-repo-check", prompt]


@attrs.frozen
class Claude(Profile):
    def env(self, w: Where) -> dict[str, str]:
        return {
            "CLAUDE_CONFIG_DIR": str(self.live_dir(w)),
            "ANTHROPIC_BASE_URL": w.url,
            "ANTHROPIC_API_KEY": "sk-fake",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
        }

    def turn(self, prompt: str, resume: bool) -> list[str]:
        return ["-p", "--output-format", "json", *(["--continue"] if resume else []), prompt]


@attrs.frozen
class Gemini(Profile):
    def configure(self, w: Where, first_life: bool) -> None:
        if first_life:
            settings = {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                # docs/HARNESSES.md: Gemini's own session cleanup must not delete
                # sessions a restore brings back.
                "general": {"sessionRetention": {"enabled": False}, "enableAutoUpdate": False},
                "privacy": {"usageStatisticsEnabled": False},
            }
            _write(self.live_dir(w) / "settings.json", json.dumps(settings, indent=2))

    def env(self, w: Where) -> dict[str, str]:
        return {
            "GEMINI_CLI_HOME": str(self.live_dir(w).parent),
            "GOOGLE_GEMINI_BASE_URL": w.url,
            "GEMINI_API_KEY": "fake-key",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }

    def turn(self, prompt: str, resume: bool) -> list[str]:
        return [*(["--resume", "latest"] if resume else []), "-p", prompt]


@attrs.frozen
class Opencode(Profile):
    def configure(self, w: Where, first_life: bool) -> None:
        # The deployment links $HOME/.local/share/opencode to the live tree (ln -sfn).
        share = w.home / ".local" / "share"
        share.mkdir(parents=True, exist_ok=True)
        link = share / "opencode"
        if not link.is_symlink():
            os.symlink(self.live_dir(w), link)
        self.live_dir(w).mkdir(parents=True, exist_ok=True)
        config = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "model": f"fake/{MODEL}",
            "small_model": f"fake/{MODEL}",
            "provider": {
                "fake": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Fake",
                    "options": {"baseURL": f"{w.url}/v1", "apiKey": "fake-key"},
                    "models": {MODEL: {"name": "Fake model"}},
                }
            },
        }
        _write(w.home / ".config" / "opencode" / "opencode.json", json.dumps(config, indent=2))

    def env(self, w: Where) -> dict[str, str]:
        return {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}

    def turn(self, prompt: str, resume: bool) -> list[str]:
        return ["run", *(["--continue"] if resume else []), prompt]


@attrs.frozen
class OpenClaw(Profile):
    def configure(self, w: Where, first_life: bool) -> None:
        if first_life:
            config = {
                "models": {
                    "mode": "merge",
                    "catalogRefresh": {"enabled": False},
                    "providers": {
                        "fake": {
                            "baseUrl": f"{w.url}/v1",
                            "apiKey": "fake-key",
                            "api": "openai-completions",
                            "request": {"allowPrivateNetwork": True},
                            "models": [
                                {
                                    "id": MODEL,
                                    "name": "Fake model",
                                    "contextWindow": 128000,
                                    "maxTokens": 4096,
                                    "input": ["text"],
                                    "reasoning": False,
                                }
                            ],
                        }
                    },
                },
                "agents": {
                    "defaults": {"model": {"primary": f"fake/{MODEL}"}, "workspace": str(w.work)}
                },
                # no Chromium to drive here; starting its plugin tripled a turn's time
                "browser": {"enabled": False},
            }
            _write(self.live_dir(w) / "openclaw.json", json.dumps(config, indent=2))

    def env(self, w: Where) -> dict[str, str]:
        return {"OPENCLAW_STATE_DIR": str(self.live_dir(w))}

    def turn(self, prompt: str, resume: bool) -> list[str]:
        # The main session continues by itself: a resumed turn is the same command.
        return ["agent", "--local", "--agent", "main", "--json", "-m", prompt]


@attrs.frozen
class Hermes(Profile):
    def configure(self, w: Where, first_life: bool) -> None:
        if first_life:
            _write(
                self.live_dir(w) / "config.yaml",
                f"""\
model:
  provider: custom
  default: {MODEL}
  base_url: {w.url}/v1
  api_key: fake-key
  context_length: 128000
security:
  tirith_enabled: false
""",
            )

    def env(self, w: Where) -> dict[str, str]:
        return {"HERMES_HOME": str(self.live_dir(w))}

    def turn(self, prompt: str, resume: bool) -> list[str]:
        return ["chat", "-Q", *(["--continue"] if resume else []), "-q", prompt]


def _json(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"


# harness -> (a secrets path relative to the live tree, the file's text for a token)
LOGINS: dict[str, tuple[str, Callable[[str], str]]] = {
    "codex": (  # MCP OAuth store without a keyring; no MCP server is configured
        ".credentials.json",
        lambda t: _json({"fake|0": {"server_name": "fake", "access_token": t}}),
    ),
    "claude": (  # no claudeAiOauth: ANTHROPIC_API_KEY stays the login
        ".credentials.json",
        lambda t: _json({"syncengineHarnessSuite": {"token": t}}),
    ),
    "gemini": (
        "mcp-oauth-tokens.json",
        lambda t: _json([{"serverName": "fake", "token": {"accessToken": t}}]),
    ),
    "opencode": ("mcp-auth.json", lambda t: _json({"fake": {"tokens": {"accessToken": t}}})),
    "openclaw": ("credentials/syncengine-harness-suite.json", lambda t: _json({"token": t})),
    "hermes": (".env", lambda t: f"SYNCENGINE_HARNESS_SUITE_TOKEN={t}\n"),
}

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Codex("codex", "codex-home"),
        Claude("claude", "agent-state/claude"),
        Gemini("gemini", "agent-state/gemini-home/.gemini"),
        Opencode("opencode", "opencode-share"),
        OpenClaw("openclaw", "oc-home/.openclaw"),
        Hermes("hermes", "hermes"),
    )
}
