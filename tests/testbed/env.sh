# env.sh -- source from a test script (bash) to use the running test bed:
#   . "$ACCRUN_SOURCE_DIR/tests/testbed/env.sh" || exit $?
# Exports ACCRUN_TESTBED_* (and SLURM_CONF, OMPI_* settings) from `testbed env`, plus
# ACCRUN_TESTBED (the testbed script) and the function tb_ssh HOST CMD...
# Returns 77 (skip) when this machine cannot run the test bed, 1 when it is not up.
ACCRUN_TESTBED=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/testbed
__tb_env=$("$ACCRUN_TESTBED" env) || return $? 2>/dev/null || exit $?
eval "$__tb_env"; unset __tb_env
export ACCRUN_TESTBED
tb_ssh() { ssh -F "$ACCRUN_TESTBED_SSH_CONFIG" "$@"; }
