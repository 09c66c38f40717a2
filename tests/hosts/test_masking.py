from __future__ import annotations

from hosts.masking import masked_env


def test_secret_looking_names_have_their_values_hidden_and_the_rest_kept() -> None:
    env = {
        "HF_TOKEN": "hf_abc",
        "aws_secret_access_key": "s3cr3t",
        "DB_PASSWORD": "pw",
        "LDAP_PASSWD": "pw2",
        "OPENAI_API_KEY": "sk-1",
        "GOOGLE_APPLICATION_CREDENTIALS": "/etc/creds.json",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": 4,
    }
    masked = masked_env(env)
    assert masked == {
        "HF_TOKEN": "***",
        "aws_secret_access_key": "***",
        "DB_PASSWORD": "***",
        "LDAP_PASSWD": "***",
        "OPENAI_API_KEY": "***",
        "GOOGLE_APPLICATION_CREDENTIALS": "***",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": 4,
    }
    assert env["HF_TOKEN"] == "hf_abc"  # a copy: the stored environment is not changed
