"""Entry point of the ``proctor`` command; each subcommand group lives in its own module."""

from __future__ import annotations

import typer

from proctor.cli.doctor import doctor
from proctor.cli.images_cmd import app as images_app
from proctor.cli.envs_cmd import app as envs_app
from proctor.cli.envs_cmd import eval_command
from proctor.cli.sandbox_cmd import app as sandbox_app
from proctor.cli.tiny_model_cmd import tiny_model
from proctor.cli.plan_cmd import plan
from proctor.cli.report_cmd import report
from proctor.cli.train_cmd import train
from proctor.cli.serve_cmd import serve

app = typer.Typer(
    help="Proctor: Docker-sandboxed verifiable environments and a GRPO trainer.",
    no_args_is_help=True,
    add_completion=False,
)

app.add_typer(images_app, name="images")
app.command("doctor")(doctor)

app.add_typer(sandbox_app, name="sandbox")
app.add_typer(envs_app, name="envs")
app.command("eval")(eval_command)
app.command("tiny-model")(tiny_model)
app.command("train")(train)
app.command("report")(report)
app.command("plan")(plan)
app.command("serve")(serve)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
