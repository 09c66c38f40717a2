"""Request and response bodies. Output schemas read model attributes (``from_attributes``);
input schemas refuse unknown keys so a typo is a 422, not a silently ignored setting.

One module per resource (``base``: ids, text, the error shape and the page envelope); every
name is re-exported here, where the routers import them."""

from __future__ import annotations

from specdash.api.schemas.base import _TEXT as _TEXT
from specdash.api.schemas.base import MAX_ID as MAX_ID
from specdash.api.schemas.base import ErrorDetail as ErrorDetail
from specdash.api.schemas.base import ErrorOut as ErrorOut
from specdash.api.schemas.base import Id as Id
from specdash.api.schemas.base import In as In
from specdash.api.schemas.base import Name as Name
from specdash.api.schemas.base import Page as Page
from specdash.api.schemas.base import Text as Text
from specdash.api.schemas.experiments import ArmOut as ArmOut
from specdash.api.schemas.experiments import ComparisonOut as ComparisonOut
from specdash.api.schemas.experiments import ExperimentAccepted as ExperimentAccepted
from specdash.api.schemas.experiments import ExperimentDetailOut as ExperimentDetailOut
from specdash.api.schemas.experiments import ExperimentIn as ExperimentIn
from specdash.api.schemas.experiments import ExperimentOut as ExperimentOut
from specdash.api.schemas.experiments import ExperimentPage as ExperimentPage
from specdash.api.schemas.experiments import RatioOut as RatioOut
from specdash.api.schemas.experiments import ScheduleOut as ScheduleOut
from specdash.api.schemas.experiments import StepOut as StepOut
from specdash.api.schemas.experiments import VerdictOut as VerdictOut
from specdash.api.schemas.jobs import HealthOut as HealthOut
from specdash.api.schemas.jobs import HolderIn as HolderIn
from specdash.api.schemas.jobs import InstanceAccepted as InstanceAccepted
from specdash.api.schemas.jobs import InstanceEventOut as InstanceEventOut
from specdash.api.schemas.jobs import InstanceEventPage as InstanceEventPage
from specdash.api.schemas.jobs import InstanceOut as InstanceOut
from specdash.api.schemas.jobs import InstancePage as InstancePage
from specdash.api.schemas.jobs import JobOut as JobOut
from specdash.api.schemas.jobs import JobPage as JobPage
from specdash.api.schemas.jobs import KillHoldersIn as KillHoldersIn
from specdash.api.schemas.jobs import LogOut as LogOut
from specdash.api.schemas.registry import ContainerIn as ContainerIn
from specdash.api.schemas.registry import ContainerOut as ContainerOut
from specdash.api.schemas.registry import ContainerPage as ContainerPage
from specdash.api.schemas.registry import ContainerPatch as ContainerPatch
from specdash.api.schemas.registry import HostIn as HostIn
from specdash.api.schemas.registry import HostOut as HostOut
from specdash.api.schemas.registry import HostPage as HostPage
from specdash.api.schemas.registry import HostPatch as HostPatch
from specdash.api.schemas.registry import ProfileIn as ProfileIn
from specdash.api.schemas.registry import ProfileOut as ProfileOut
from specdash.api.schemas.registry import ProfilePage as ProfilePage
from specdash.api.schemas.registry import ProfilePatch as ProfilePatch
from specdash.api.schemas.sweeps import LevelOut as LevelOut
from specdash.api.schemas.sweeps import ProgressOut as ProgressOut
from specdash.api.schemas.sweeps import SampleOut as SampleOut
from specdash.api.schemas.sweeps import SamplePage as SamplePage
from specdash.api.schemas.sweeps import SloIn as SloIn
from specdash.api.schemas.sweeps import SweepAccepted as SweepAccepted
from specdash.api.schemas.sweeps import SweepDetailOut as SweepDetailOut
from specdash.api.schemas.sweeps import SweepIn as SweepIn
from specdash.api.schemas.sweeps import SweepLoadIn as SweepLoadIn
from specdash.api.schemas.sweeps import SweepOut as SweepOut
from specdash.api.schemas.sweeps import SweepPage as SweepPage
