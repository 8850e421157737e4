/*
 * relay function ls / relay function inspect <name>: the read-only views of
 * the state database (state.h). They read <data dir>/db.sqlite3 only (opened
 * read-only; RELAY_DATA_DIR is the only setting they use), work with
 * the runtime down and never create the data directory or the database.
 * Exit status: 0, 1 on an unreadable database or an unknown function, 2 on
 * a usage error.
 */
#ifndef RELAY_CMD_FUNCTION_STATE_H
#define RELAY_CMD_FUNCTION_STATE_H

#include "cmd/cmd.h"

int function_state_ls_exec(const struct cmd *self, const struct cmd_args *args, const struct config *cfg);
int function_state_inspect_exec(const struct cmd *self, const struct cmd_args *args,
			  const struct config *cfg);

#endif
