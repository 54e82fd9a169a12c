/* ingester.h -- placeholder during bring-up; replaced by the real module. */
#ifndef ING_INGESTER_H
#define ING_INGESTER_H
int ing_module_placeholder(void);
#endif
