/* querier.h -- placeholder during bring-up; replaced by the real module. */
#ifndef QRY_QUERIER_H
#define QRY_QUERIER_H
int qry_module_placeholder(void);
#endif
