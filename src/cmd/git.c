/* relay git keygen|set|sync|status|remove */
#include "cmd/cmd.h"

const struct cmd cmd_git_keygen = {
	"git keygen", "", "generate an SSH deploy key", NULL, CMD_FILES, cmd_not_implemented,
};
const struct cmd cmd_git_set = {
	"git set",
	"[--ref REF] [--path PATH] [--webhook-secret NAME] <repository>",
	"set the git source to sync from",
	NULL,
	CMD_FILES,
	cmd_not_implemented,
};
const struct cmd cmd_git_sync = {
	"git sync", "",	       "sync the source into the functions directory",
	NULL,	    CMD_FILES, cmd_not_implemented,
};
const struct cmd cmd_git_status = {
	"git status", "", "show git sync state", NULL, CMD_FILES, cmd_not_implemented,
};
const struct cmd cmd_git_remove = {
	"git remove", "",	 "forget the source and drop the checkout",
	NULL,	      CMD_FILES, cmd_not_implemented,
};
