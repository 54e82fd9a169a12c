/*
 * fuzz_rpc.c -- internal RPC decoding: a frame as an ingester receives it
 * from common/rpc.c's REP socket, handed to ing_serve (ingester/ingester.c),
 * which unpacks smolder.v1.Request into its arena and runs the method
 * against a real database (RocksDB in a temporary directory, created once
 * in LLVMFuzzerInitialize and removed at exit).  Then the Response it
 * writes is unpacked as the querier / distributor side does.
 *
 * Properties: ing_serve always answers with a Response that unpacks; its
 * code equals the returned value; a non-zero code carries a message.
 */
#include "ingester/ingester.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/rpc.h"
#include "fuzz.h"
#include "tests/sm_test_rmtree.h"

static struct ingester *ing;
static char dir[64];

static void
teardown(void)
{
	ing_destroy(ing);
	ing = NULL;
	if (dir[0] != '\0')
		(void)sm_test_rm_tree(dir);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char url[96], id[] = "fuzz-ingester";
	struct ing_config cfg = {
		.rpc_url = url,
		.data_dir = dir,
		.instance_id = id,
		.rpc_max_conns = 16,
		.rpc_workers = 1,
		.rpc_recv_max = 64 << 20,
		.bucket_ms = 10000,
		.block_ms = 3600000,
		/* No memory bound: it measures the fuzzer's own RSS
		 * (ASan shadow included) and would refuse every write. */
		.head_max_bytes = 0,
		.block_cache = 8 << 20,
		.rocksdb_cache = 8 << 20,
		.write_buffer = 1 << 20,
		.idempotency_ms = 600000,
	};
	struct sm_err err;
	int i;

	(void)argc;
	(void)argv;
	sm_log_set_level(SM_LOG_ERROR);
	snprintf(dir, sizeof(dir), "/tmp/sm-fuzz-rpc-XXXXXX");
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		exit(2);
	}
	snprintf(url, sizeof(url), "inproc://fuzz-rpc-%d", (int)getpid());
	sm_err_clear(&err);
	if (ing_create(&cfg, NULL, &ing, &err) != 0 ||
	    ing_start(ing, &err) != 0) {
		fprintf(stderr, "fuzz_rpc: ingester: %s\n", err.msg);
		exit(2);
	}
	atexit(teardown);
	for (i = 0; i < 3000 && !ing_ready(ing); i++)
		usleep(10000);
	if (!ing_ready(ing)) {
		fprintf(stderr, "fuzz_rpc: ingester not ready\n");
		exit(2);
	}
	return (0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sm_buf resp;
	Smolder__V1__Response *r;
	int rv;

	sm_buf_init(&resp);
	rv = ing_serve(ing, data, size, &resp);
	FUZZ_CHECK(resp.err == 0, "response buffer: %d", resp.err);
	r = smolder__v1__response__unpack(NULL, resp.len,
	    (const uint8_t *)resp.b);
	FUZZ_CHECK(r != NULL, "ing_serve wrote %zu undecodable bytes",
	    resp.len);
	FUZZ_CHECK(r->code == rv, "response code %d, returned %d", r->code,
	    rv);
	if (rv != 0)
		FUZZ_CHECK(r->message != NULL && r->message[0] != '\0',
		    "error %d without a message", rv);
	smolder__v1__response__free_unpacked(r, NULL);
	sm_buf_fini(&resp);
	return (0);
}
