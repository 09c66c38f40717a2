import re

import django.db.models.deletion
from django.db import migrations, models

# What benchmarks.experiments.matrix wrote into a variant's notes before the link existed.
VARIANT_NOTE = re.compile(r"^Variant of .* \(#(\d+)\): ")


def link_existing_variants(apps, schema_editor):
    profile_model = apps.get_model("hosts", "ServerProfile")
    known = set(profile_model.objects.values_list("pk", flat=True))
    for profile in profile_model.objects.filter(notes__startswith="Variant of "):
        match = VARIANT_NOTE.match(profile.notes)
        if match and int(match.group(1)) in known and int(match.group(1)) != profile.pk:
            profile.variant_of_id = int(match.group(1))
            profile.save(update_fields=["variant_of"])


class Migration(migrations.Migration):
    dependencies = [
        ("hosts", "0009_jobs_and_tokens_move_to_core"),
    ]

    operations = [
        migrations.AddField(
            model_name="serverprofile",
            name="variant_of",
            field=models.ForeignKey(
                blank=True,
                help_text="The profile this one is a parameter-matrix variant of (listed under it)",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="variants",
                to="hosts.serverprofile",
            ),
        ),
        migrations.RunPython(link_existing_variants, migrations.RunPython.noop),
    ]
