# shellcheck shell=sh
# /etc/profile.d/jiyu.sh: an SSH login shell gets the container's PATH back (/etc/profile resets
# PATH; jiyu-entrypoint hands sshd the container's value as JIYU_CONTAINER_PATH).
if [ -n "${JIYU_CONTAINER_PATH:-}" ]; then
    PATH=$JIYU_CONTAINER_PATH
    export PATH
fi
