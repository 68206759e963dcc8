"""A pipeline that is not part of the product, added with one registry line (`register`): it counts a blend's
datasets into ``<base>/toy/count.txt``. The registry test sees it in the definitions, status, verify and the CLI.

Run the command line with it: ``python -c "import nemotron_assets_tests.defs.toy_pipeline as toy; toy.register();
from nemotron_assets.cli import run; run()" materialize sample``."""

import dagster as dg

from nemotron_assets.core.layout import base_dir
from nemotron_assets.core.pipeline import Assets, BlendScope, Pipeline, StatusRequest, Step
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.status import OutputStatus, Problem, StatusSection
from nemotron_assets.defs.registry import PIPELINES


def count_path(base: str) -> str:
    return f"{base}/toy/count.txt"


def toy_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    blend, scope = blend_scope.blend, blend_scope.scope

    @dg.asset(key=scope.key("toy_count"), group_name=scope.group, deps=[upstream["source_split"]],
              partitions_def=scope.partitions("blend", None))
    def toy_count(context: dg.AssetExecutionContext, storage: StorageResource):
        base = scope.base(scope.sample_of(context))
        storage.get().write_bytes(count_path(base), f"{len(blend.entries())}\n".encode())
        context.log.info(f"counted {len(blend.entries())} dataset(s)")

    return {"toy_count": toy_count}


def toy_status(request: StatusRequest) -> list[StatusSection]:
    written = request.store.exists(count_path(base_dir(request.blend.name, request.sample)))
    return [StatusSection("Toy counts", outputs=[OutputStatus("toy_count", "", "done" if written else "missing")])]


def toy_problems(instance: dg.DagsterInstance, store, blend, plans_of=None) -> list[Problem]:
    path = count_path(blend.name)
    if not store.exists(path):
        return [Problem(store.url(path), f"does not exist: materialize {blend.name}/toy_count")]
    return []


TOY = Pipeline(name="toy", applies=lambda blend: True, steps=(Step("toy_count", by_dataset=False, options=()),),
               assets=toy_assets, status=toy_status, problems=toy_problems)


def register() -> None:
    """The one registry line."""
    PIPELINES.append(TOY)
