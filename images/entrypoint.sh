#!/usr/bin/env bash
# jiyu-entrypoint: what the container runs under tini.
#
#   (no arguments) | lab [jupyter args]   sshd (if a key is given), then JupyterLab with a token
#   any other command                      sshd (if a key is given), then exec that command
#
# JupyterLab never starts without authentication: the token comes from JUPYTER_TOKEN or is
# generated and printed once; arguments that would blank or replace it are refused, and
# jupyter_server_config.py (loaded last) pins it against other config files.
# sshd starts only when SSH_PUBLIC_KEY or an authorized_keys mount is given: key-only, no root
# login, unprivileged on SSH_PORT, host keys generated on first start into a volume.
# Every path and command below is an environment variable whose default is the image's, so the
# tests run this very script unprivileged outside Docker.
set -euo pipefail

: "${JIYU_WORKSPACE:=/workspace}"
: "${JIYU_STATE_DIR:=${HOME}/.local/state/jiyu}"
: "${JIYU_SSH_HOST_KEY_DIR:=/var/lib/jiyu/ssh-host-keys}"
: "${JIYU_JUPYTER_CONFIG:=/etc/jiyu/jupyter_server_config.py}"
: "${JIYU_JUPYTER:=jupyter}"
: "${JIYU_SSHD:=/usr/sbin/sshd}"
: "${SSH_AUTHORIZED_KEYS_FILE:=/etc/jiyu/authorized_keys}"
: "${SSH_PORT:=2222}"
: "${JUPYTER_IP:=0.0.0.0}"
: "${JUPYTER_PORT:=8888}"

# Variables an SSH session inherits from the container (sshd starts sessions with a bare
# environment, so `python`, `nvidia-smi` and JIYU_HOME would otherwise differ from Jupyter's).
SESSION_ENV='^(PATH|LD_LIBRARY_PATH|LANG|LC_ALL|TZ|PYTHONPATH|OMP_NUM_THREADS|HF_HOME|(CUDA|NVIDIA|NCCL|TORCH|CONDA|JIYU)_[A-Z0-9_]*|JUPYTER_(PATH|CONFIG_DIR|DATA_DIR|RUNTIME_DIR))$'
SECRET_NAME='(TOKEN|SECRET|PASSWORD|KEY)'

say() { printf 'jiyu: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

# --- SSH -------------------------------------------------------------------------------------

# Prints every key line of one source's text; dies on the first line that is not a public key,
# because a mistyped key that is silently dropped locks the user out with no hint why.
keys_from() {
    local source=$1 text=$2 line n=0
    while IFS= read -r line || [[ -n $line ]]; do
        n=$((n + 1))
        line=${line%$'\r'}
        [[ -z ${line//[[:space:]]/} || $line =~ ^[[:space:]]*# ]] && continue
        ssh-keygen -l -f /dev/stdin <<<"$line" >/dev/null 2>&1 \
            || die "$source line $n is not an SSH public key: ${line:0:40}"
        printf '%s\n' "$line"
    done <<<"$text"
}

authorized_keys() {
    keys_from SSH_PUBLIC_KEY "${SSH_PUBLIC_KEY:-}"
    if [[ -d $SSH_AUTHORIZED_KEYS_FILE ]]; then
        die "$SSH_AUTHORIZED_KEYS_FILE is a directory: the host file did not exist when the container was created"
    elif [[ -f $SSH_AUTHORIZED_KEYS_FILE ]]; then
        [[ -r $SSH_AUTHORIZED_KEYS_FILE ]] || die "$SSH_AUTHORIZED_KEYS_FILE is not readable by uid $(id -u)"
        keys_from "$SSH_AUTHORIZED_KEYS_FILE" "$(cat "$SSH_AUTHORIZED_KEYS_FILE")"
    fi
}

fingerprint() { ssh-keygen -l -f "$1" | cut -d' ' -f2; }

ensure_host_keys() {
    local dir=$JIYU_SSH_HOST_KEY_DIR type key
    install -d -m 0700 "$dir" 2>/dev/null && [[ -w $dir ]] \
        || die "SSH host key folder $dir is not writable by uid $(id -u)"
    for type in ed25519 rsa; do
        key=$dir/ssh_host_${type}_key
        [[ -s $key ]] && continue
        ssh-keygen -q -t "$type" -N '' -C "jiyu host key" -f "$key"
        say "generated SSH host key $key"
    done
}

# One SetEnv line (sshd keeps only the first SetEnv directive) with the container's variables;
# JIYU_CONTAINER_PATH lets /etc/profile.d restore PATH after a login shell's /etc/profile resets it.
session_setenv() {
    local name line="SetEnv JIYU_CONTAINER_PATH=\"$PATH\""
    while IFS= read -r name; do
        [[ $name =~ $SESSION_ENV && ! $name =~ $SECRET_NAME ]] || continue
        [[ ${!name} == *[\"\\$'\n']* ]] && continue
        line+=" $name=\"${!name}\""
    done < <(compgen -e)
    printf '%s\n' "$line"
}

sshd_config() {
    local run=$1 key
    cat <<CONFIG
# Written by jiyu-entrypoint at every start; edits here are lost.
Port $SSH_PORT
PidFile $run/sshd.pid
AuthorizedKeysFile $run/authorized_keys
AllowUsers $(id -un)
PermitRootLogin no
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
UsePAM no
StrictModes yes
X11Forwarding no
AllowTcpForwarding yes
PrintMotd no
Subsystem sftp internal-sftp
CONFIG
    for key in "$JIYU_SSH_HOST_KEY_DIR"/ssh_host_*_key; do
        printf 'HostKey %s\n' "$key"
    done
    session_setenv
}

# sshd writes its pid file once it listens; a taken port makes it exit instead.
wait_until_listening() {
    local pid=$1 pid_file=$2 tries=100
    until [[ -s $pid_file ]]; do
        kill -0 "$pid" 2>/dev/null || die "sshd stopped at start (its message is above)"
        ((tries-- > 0)) || die "sshd did not start listening on port $SSH_PORT within 10 s"
        sleep 0.1
    done
}

start_sshd() {
    local keys run=$JIYU_STATE_DIR/sshd
    keys=$(authorized_keys)
    if [[ -z $keys ]]; then
        say "SSH off: set SSH_PUBLIC_KEY or mount an authorized_keys file at $SSH_AUTHORIZED_KEYS_FILE"
        return
    fi
    [[ $(id -u) != 0 ]] || die "not starting sshd as root (root login is disabled): run the container as its default user, uid 1000"
    [[ $JIYU_SSHD == /* ]] || die "JIYU_SSHD must be an absolute path (sshd re-executes itself): $JIYU_SSHD"
    install -d -m 0700 "$run"
    (umask 077 && printf '%s\n' "$keys" >"$run/authorized_keys")
    ensure_host_keys
    sshd_config "$run" >"$run/sshd_config"
    "$JIYU_SSHD" -t -f "$run/sshd_config" || die "sshd rejected $run/sshd_config"
    rm -f "$run/sshd.pid"
    "$JIYU_SSHD" -D -e -f "$run/sshd_config" &
    wait_until_listening $! "$run/sshd.pid"
    echo sshd >>"$JIYU_STATE_DIR/services"
    say "SSH on port $SSH_PORT: user $(id -un), public-key only, $(wc -l <<<"$keys") key(s); host keys" \
        "$(for key in "$JIYU_SSH_HOST_KEY_DIR"/ssh_host_*_key.pub; do fingerprint "$key"; done | paste -sd' ')"
}

# --- A shared GPU box ------------------------------------------------------------------------

# JIYU_BOX_INIT=1: this container is a box several users share (a JupyterHub's image started as
# root): its GPU book keeper is set up (or found running) before anything else starts, at
# JIYU_BOX (default /var/lib/jiyu/box), for the members of JIYU_BOX_GROUP when it is set.
start_box() {
    [[ ${JIYU_BOX_INIT:-0} == 1 ]] || return 0
    local args=(box init)
    [[ -z ${JIYU_BOX:-} ]] || args+=(--path "$JIYU_BOX")
    [[ -z ${JIYU_BOX_GROUP:-} ]] || args+=(--group "$JIYU_BOX_GROUP")
    "${JIYU_CLI:-jiyu}" "${args[@]}" >&2 || die "the GPU box could not be set up (jiyu ${args[*]})"
}

# --- JupyterLab ------------------------------------------------------------------------------

# A token on the command line would show in `ps` (also on the host); an empty one, or another
# identity provider or config file, could turn authentication off.
refuse_unauthenticated() {
    local arg
    for arg in "$@"; do
        case $arg in
            --*.token | --*.token=* | --token | --token=*)
                die "refusing to start JupyterLab with ${arg%%=*} on the command line: set JUPYTER_TOKEN instead (never empty)" ;;
            --*identity_provider_class* | --*login_handler_class* | --*allow_unauthenticated_access*)
                die "refusing to start JupyterLab with ${arg%%=*}: the token is how this image authenticates" ;;
            --config | --config=* | --*.config_file | --*.config_file=*)
                die "refusing ${arg%%=*}: put settings in ~/.jupyter/jupyter_server_config.py (the image's config must load last)" ;;
        esac
    done
    [[ -r $JIYU_JUPYTER_CONFIG ]] \
        || die "refusing to start JupyterLab without authentication: $JIYU_JUPYTER_CONFIG (which enforces the token) is missing"
    [[ -d $JIYU_WORKSPACE ]] || die "workspace $JIYU_WORKSPACE does not exist"
}

# A bind mount keeps the host's owner: say so now rather than at the first failed save.
warn_unwritable() {
    local folder
    for folder in "$@"; do
        [[ ! -d $folder || -w $folder ]] \
            || say "warning: ${folder%/} is not writable by uid $(id -u): chown it on the host or run with --user \$(id -u)"
    done
}

new_token() { od -An -vtx1 -N24 /dev/urandom | tr -d ' \n'; }

start_jupyterlab() {
    if [[ -n ${JUPYTER_TOKEN:-} ]]; then
        say "JupyterLab on port $JUPYTER_PORT; token from JUPYTER_TOKEN"
    else
        JUPYTER_TOKEN=$(new_token)
        say "JupyterLab: http://127.0.0.1:$JUPYTER_PORT/lab?token=$JUPYTER_TOKEN  (generated token; set JUPYTER_TOKEN to choose one)"
    fi
    export JUPYTER_TOKEN
    echo jupyter >>"$JIYU_STATE_DIR/services"
    cd "$JIYU_WORKSPACE"
    exec "$JIYU_JUPYTER" lab --config="$JIYU_JUPYTER_CONFIG" --no-browser \
        --ServerApp.ip="$JUPYTER_IP" --ServerApp.port="$JUPYTER_PORT" --ServerApp.port_retries=0 \
        --ServerApp.root_dir="$JIYU_WORKSPACE" "$@"
}

main() {
    [[ $# -gt 0 ]] || set -- lab
    [[ $1 != lab ]] || refuse_unauthenticated "${@:2}"
    install -d -m 0700 "$JIYU_STATE_DIR"
    : >"$JIYU_STATE_DIR/services"
    warn_unwritable "$JIYU_WORKSPACE" "$JIYU_WORKSPACE"/*/
    start_box
    start_sshd
    [[ $1 != lab ]] || start_jupyterlab "${@:2}"
    exec "$@"
}

main "$@"
