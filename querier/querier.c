#include "querier.h"
int qry_module_placeholder(void) { return (0); }
