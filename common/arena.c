/*
 * arena.c -- chunked bump allocator.  Blocks grow geometrically from 4 KiB
 * to 1 MiB; a request bigger than a quarter of the current block size gets a
 * block of its own so large allocations never waste a half-empty block.
 */
#include "arena.h"

#include <string.h>

#define ARENA_ALIGN 16
#define ARENA_FIRST 4096
#define ARENA_MAXBLOCK (1u << 20)

struct arena_block {
	struct arena_block *next;
	size_t size;   /* usable bytes in data[] */
	size_t used;
	_Alignas(ARENA_ALIGN) unsigned char data[];
};

struct sm_arena {
	struct arena_block *head;   /* current block, newest first */
	size_t next_size;
	size_t used;                /* bytes handed out (budget accounting) */
	size_t budget;
};

static struct arena_block *
arena_block_new(size_t size)
{
	struct arena_block *b = sm_malloc(sizeof(*b) + size);

	if (b == NULL)
		return (NULL);
	b->next = NULL;
	b->size = size;
	b->used = 0;
	return (b);
}

struct sm_arena *
sm_arena_create(size_t budget)
{
	struct sm_arena *a = sm_malloc(sizeof(*a));

	if (a == NULL)
		return (NULL);
	a->head = NULL;
	a->next_size = ARENA_FIRST;
	a->used = 0;
	a->budget = budget;
	return (a);
}

void
sm_arena_destroy(struct sm_arena *a)
{
	struct arena_block *b, *n;

	if (a == NULL)
		return;
	for (b = a->head; b != NULL; b = n) {
		n = b->next;
		sm_free(b);
	}
	sm_free(a);
}

void
sm_arena_reset(struct sm_arena *a)
{
	struct arena_block *b, *n, *last = NULL;

	/* Keep the oldest (smallest) block; free the rest. */
	for (b = a->head; b != NULL; b = n) {
		n = b->next;
		if (n == NULL) {
			last = b;
			break;
		}
		sm_free(b);
	}
	a->head = last;
	if (last != NULL) {
		last->used = 0;
		last->next = NULL;
	}
	a->next_size = ARENA_FIRST * 2;
	a->used = 0;
}

void *
sm_arena_alloc(struct sm_arena *a, size_t n)
{
	struct arena_block *b = a->head;
	size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
	void *p;

	if (need < n)
		return (NULL); /* overflow */
	if (a->budget != 0 && (need > a->budget || a->used > a->budget - need))
		return (NULL);
	if (b == NULL || b->size - b->used < need) {
		if (need > a->next_size / 4) {
			/* Dedicated block, linked behind the current one so
			 * the current block keeps serving small requests. */
			struct arena_block *big = arena_block_new(need);

			if (big == NULL)
				return (NULL);
			big->used = need;
			if (b != NULL) {
				big->next = b->next;
				b->next = big;
			} else {
				a->head = big;
			}
			a->used += need;
			return (big->data);
		}
		b = arena_block_new(a->next_size);
		if (b == NULL)
			return (NULL);
		b->next = a->head;
		a->head = b;
		if (a->next_size < ARENA_MAXBLOCK)
			a->next_size *= 2;
	}
	p = b->data + b->used;
	b->used += need;
	a->used += need;
	return (p);
}

void *
sm_arena_calloc(struct sm_arena *a, size_t nmemb, size_t n)
{
	void *p;

	if (n != 0 && nmemb > SIZE_MAX / n)
		return (NULL);
	p = sm_arena_alloc(a, nmemb * n);
	if (p != NULL)
		memset(p, 0, nmemb * n);
	return (p);
}

char *
sm_arena_strndup(struct sm_arena *a, const char *s, size_t n)
{
	char *d;

	if (n == SIZE_MAX)
		return (NULL);
	d = sm_arena_alloc(a, n + 1);
	if (d == NULL)
		return (NULL);
	if (n != 0)
		memcpy(d, s, n);
	d[n] = '\0';
	return (d);
}

void *
sm_arena_grow(struct sm_arena *a, void *p, size_t old_n, size_t new_n,
    size_t elem)
{
	void *q;

	if (elem != 0 && new_n > SIZE_MAX / elem)
		return (NULL);
	q = sm_arena_alloc(a, new_n * elem);
	if (q != NULL && old_n != 0)
		memcpy(q, p, SM_MIN(old_n, new_n) * elem);
	return (q);
}

size_t
sm_arena_used(const struct sm_arena *a)
{
	return (a->used);
}

size_t
sm_arena_budget(const struct sm_arena *a)
{
	return (a->budget);
}

static void *
arena_pbc_alloc(void *data, size_t size)
{
	return (sm_arena_alloc(data, size));
}

static void
arena_pbc_free(void *data, void *p)
{
	(void)data;
	(void)p;
}

ProtobufCAllocator
sm_arena_pbc(struct sm_arena *a)
{
	ProtobufCAllocator al = {
		.alloc = arena_pbc_alloc,
		.free = arena_pbc_free,
		.allocator_data = a,
	};
	return (al);
}

void
sm_arena_pbc_drop_unknown(ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	char *base = (char *)m;

	m->n_unknown_fields = 0;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];

		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base +
			    f->quantifier_offset);
			ProtobufCMessage **v = *(ProtobufCMessage ***)(base +
			    f->offset);

			for (size_t k = 0; k < n; k++)
				if (v[k] != NULL)
					sm_arena_pbc_drop_unknown(v[k]);
		} else {
			ProtobufCMessage *sub;

			if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 &&
			    *(const uint32_t *)(base + f->quantifier_offset) !=
			    f->id)
				continue;
			if ((sub = *(ProtobufCMessage **)(base + f->offset)) !=
			    NULL)
				sm_arena_pbc_drop_unknown(sub);
		}
	}
}
