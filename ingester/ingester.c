#include "ingester.h"
int ing_module_placeholder(void) { return (0); }
