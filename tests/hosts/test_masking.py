from __future__ import annotations

from hosts.masking import masked_argv, masked_env, masked_text, masked_tree, unmask_argv, unmask_env


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


def test_names_by_word_and_values_by_shape_are_masked() -> None:
    env = {
        "DB_PASS": "pw",
        "MYSQL_PWD": "pw",
        "SENTRY_DSN": "https://k@sentry/1",
        "HTTPS_PROXY": "http://proxyuser:pr0xy@proxy:3128",
        "DATABASE_URL": "postgres://app:dbpw@db:5432/x",
        "EXTRA": "HF_TOKEN=hf_x",
        "BYPASS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "NO_PROXY": "http://proxy:3128",
    }
    assert masked_env(env) == {
        "DB_PASS": "***",
        "MYSQL_PWD": "***",
        "SENTRY_DSN": "***",
        "HTTPS_PROXY": "http://proxyuser:***@proxy:3128",
        "DATABASE_URL": "postgres://app:***@db:5432/x",
        "EXTRA": "HF_TOKEN=***",
        "BYPASS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "NO_PROXY": "http://proxy:3128",
    }


def test_secret_flags_in_an_argv_are_masked_and_counts_are_not() -> None:
    argv = [
        "env", "OPENAI_API_KEY=sk-1", "python3", "-m", "vllm.entrypoints.openai.api_server",
        "--api-key", "k1", "--admin-api-key=k2", "--hf-token", "hf_x",
        "--ssl-keyfile-password", "pw", "--max-num-batched-tokens", "8192",
        "--speculative-num-draft-tokens", "4", "--model", "https://u:pw@hub/m",
    ]  # fmt: skip
    assert masked_argv(argv) == [
        "env", "OPENAI_API_KEY=***", "python3", "-m", "vllm.entrypoints.openai.api_server",
        "--api-key", "***", "--admin-api-key=***", "--hf-token", "***",
        "--ssl-keyfile-password", "***", "--max-num-batched-tokens", "8192",
        "--speculative-num-draft-tokens", "4", "--model", "https://u:***@hub/m",
    ]  # fmt: skip
    line = "Launched detached: env HF_TOKEN=hf_x llama-server --api-key 'a b' --token=t -np 4"
    assert masked_text(line) == (
        "Launched detached: env HF_TOKEN=*** llama-server --api-key *** --token=*** -np 4"
    )
    info = {"api_key": "k", "max_total_num_tokens": 100, "args": ["--api-key", "k"]}
    assert masked_tree(info) == {
        "api_key": "***", "max_total_num_tokens": 100, "args": ["--api-key", "***"]
    }  # fmt: skip


def test_a_mask_sent_back_keeps_the_stored_secret() -> None:
    stored_env = {"DB_PASS": "real", "PROXY": "http://u:pw@h", "N": "1"}
    sent = {**masked_env(stored_env), "N": "2"}
    assert unmask_env(sent, stored_env) == ({"DB_PASS": "real", "PROXY": "http://u:pw@h",
                                             "N": "2"}, [])  # fmt: skip
    assert unmask_env({"NEW_TOKEN": "***"}, stored_env) == ({"NEW_TOKEN": "***"}, ["NEW_TOKEN"])
    stored = ["srv", "--api-key", "k1", "--token=t", "--port", "1"]
    sent_argv = [*masked_argv(stored)[:-1], "2"]
    assert unmask_argv(sent_argv, stored) == (["srv", "--api-key", "k1", "--token=t",
                                               "--port", "2"], [])  # fmt: skip
    assert unmask_argv(["srv", "--password", "***"], stored) == (["srv", "--password", "***"], [2])


def test_a_servers_log_has_its_keys_masked_in_every_form_a_server_prints_them() -> None:
    sglang = (
        "server_args=ServerArgs(model_path='/m', tokenizer_path='/m', api_key='sk 1', "
        "admin_api_key=None, max_total_tokens=4096, speculative_num_draft_tokens=4, "
        "hf_token='hf_x', port=30000)"
    )
    assert masked_text(sglang) == (
        "server_args=ServerArgs(model_path='/m', tokenizer_path='/m', api_key='***', "
        "admin_api_key=None, max_total_tokens=4096, speculative_num_draft_tokens=4, "
        "hf_token='***', port=30000)"
    )
    assert masked_text("args: {'api_key': ['sk'], 'max_num_batched_tokens': 2048}") == (
        "args: {'api_key': [***], 'max_num_batched_tokens': 2048}"
    )
    assert masked_text('{"hf_token": "hf_x", "tokenizer": "t"}') == (
        '{"hf_token": "***", "tokenizer": "t"}'
    )
    assert masked_text("Authorization: Bearer sk-a.b") == "Authorization: Bearer ***"
    # Unquoted: the value ends where the repr around it closes, and nothing after it is lost.
    assert masked_text("f(api_key=sk-2, port=1)") == "f(api_key=***, port=1)"
    assert masked_text("DB_PASS=a,b TOKEN=ab)cd") == "DB_PASS=*** TOKEN=***"
    # A non-secret name's value is read into, not skipped over.
    assert masked_text("x=ServerArgs(api_key='sk') env A=1,HF_TOKEN=hf") == (
        "x=ServerArgs(api_key='***') env A=1,HF_TOKEN=***"
    )
    # Counts of tokens are figures, not secrets; a token is a secret.
    assert masked_env({"MAX_TOTAL_TOKENS": "8", "HF_TOKEN": "t", "TOKENIZER": "x"}) == {
        "MAX_TOTAL_TOKENS": "8", "HF_TOKEN": "***", "TOKENIZER": "x"
    }  # fmt: skip
