"""lstopo and the doctor count the same CPUs and cores on every real snapshot.

The CPUs are the online ones that exist (lstopo drops offline CPUs and those a node's cpumap
names without a cpuN folder); the cores are what the doctor's expert-workers and map count
(:meth:`CpuFacts.core_count`), or unknown where the tree shows no core, as lstopo then makes
no Core object. The one place they differ on purpose is named and checked exactly.
"""

from __future__ import annotations

import pytest

from strata_doctor.facts.cpu import read_cpu
from strata_doctor.facts.numa import read_numa
from strata_doctor.root import Root
from tests.corpus import SNAPSHOTS, Corpus

pytestmark = pytest.mark.corpus

# AMD family 15h (Bulldozer, Piledriver) pairs two integer cores in a compute unit that
# shares one FPU and front end. The kernel calls the pair SMT siblings (thread_siblings_list
# 0-1, cpuinfo's "cpu cores: 8" of 16 siblings), and so does the doctor, since the expert
# kernels' vector work runs one FPU per pair; hwloc splits each pair into two Cores.
COMPUTE_UNITS = {"64amd64-4s2n4ca2co": (32, 64)}


@pytest.mark.lstopo
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_lstopo_counts_the_cpus_and_cores_the_doctor_counts(corpus: Corpus, name: str) -> None:
    root = Root(str(corpus.root(name)))
    view = corpus.lstopo(name)
    online = read_numa(root).online_cpus
    if online:
        assert view.pus == online, f"{name}: lstopo's PUs are not the online CPUs"
    cores = read_cpu(root).core_count(online or view.pus)
    if name in COMPUTE_UNITS:
        assert (cores, view.cores) == COMPUTE_UNITS[name], "compute units, counted two ways"
        return
    assert (cores or 0) == view.cores, f"{name}: {cores} cores, lstopo {view.cores}"
