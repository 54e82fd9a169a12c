/*
 * profile_sel.c -- profile_id_selector of SelectMergeStacktraces and
 * SelectMergeProfile: the merge of individual uploads, by the profile ids
 * SelectHeatmap and SelectSeries exemplars hand out (heatmap_api.c).
 *
 * Smolder keeps an upload's stacks merged into its series' 10 s bucket,
 * and per upload only (series, time, id, total) (ingester/profiles.h).
 * So a selected profile is answered from its bucket, which is exact when
 * every upload the bucket merged is selected -- the usual case: agents
 * send a series once per 10 to 15 s -- and cannot be answered otherwise.
 * The rule, decided so an answer is never silently wider than asked:
 *   1. the ids (UUIDs, with or without dashes; anything else is 400) are
 *      looked up with a Profiles round over the request's selection and
 *      range (every replica's, de-duplicated by (series, id));
 *   2. each (series, bucket) holding a selected id must hold only selected
 *      ids; one that also merged another upload answers 501 naming the
 *      profile and how many uploads share its bucket;
 *   3. the buckets are merged through the usual replica plan narrowed to
 *      them (qry_plan_restrict), read raw;
 *   4. ids not found in the selection and range select nothing: an empty
 *      answer, as for a selection that matches nothing.
 * Locking: none; one query, one thread.
 */
#include "qry_int.h"

#include <string.h>

int
qry_pref_cmp(const void *a, const void *b)
{
	const struct qry_pref *x = a, *y = b;
	int c;

	if ((c = SM_CMP(x->fp, y->fp)) != 0 || (c = SM_CMP(x->t, y->t)) != 0)
		return (c);
	return (memcmp(x->id, y->id, 16));
}

static int
id_cmp(const void *a, const void *b)
{
	return (memcmp(a, b, 16));
}

/* ids[0..n) parsed, sorted and unique; *out is heap memory (also on
 * failure). */
static int
ps_ids(char *const *ids, size_t n, uint8_t **out, size_t *nout,
    struct sm_err *err)
{
	uint8_t *v = sm_calloc(SM_MAX(n, 1), 16);
	size_t w = 0;

	*out = v;
	if (v == NULL)
		return (sm_err_set(err, SM_ENOMEM, "out of memory"));
	for (size_t i = 0; i < n; i++) {
		if (ids[i] == NULL || sm_uuid_parse(ids[i], v + 16 * i) != 0)
			return (sm_err_set(err, SM_EINVAL, "profile_id_selector: "
			    "\"%.64s\" is not a profile id (a UUID)",
			    ids[i] != NULL ? ids[i] : ""));
	}
	qsort(v, n, 16, id_cmp);
	for (size_t i = 0; i < n; i++)
		if (w == 0 || memcmp(v + 16 * (w - 1), v + 16 * i, 16) != 0)
			memmove(v + 16 * w++, v + 16 * i, 16);
	*out = v;
	*nout = w;
	return (0);
}

static bool
ps_wanted(const uint8_t *ids, size_t n, const uint8_t *id)
{
	return (bsearch(id, ids, n, 16, id_cmp) != NULL);
}

/* The records of every answer of a Profiles round, sorted by (series,
 * bucket, id), replicas' copies dropped.  *refs is heap memory. */
static int
ps_collect(const struct qry_fan *f, struct qry_pref **refs, size_t *nrefs,
    struct sm_err *err)
{
	struct qry_pref *v = NULL;
	size_t n = 0, w = 0;

	for (uint32_t i = 0; i < f->n; i++) {
		const struct qry_call *c = &f->calls[i];
		const Smolder__V1__ProfilesResponse *pr;
		struct qry_pref *nv;

		if (c->rv != 0)
			continue;
		if (c->resp->result_case !=
		    SMOLDER__V1__RESPONSE__RESULT_PROFILES) {
			sm_free(v);
			return (sm_err_set(err, SM_EPROTO, "ingester answered "
			    "without a profiles result"));
		}
		pr = c->resp->profiles;
		if (pr->n_profiles == 0)
			continue;
		if ((nv = sm_reallocarray(v, n + pr->n_profiles,
		    sizeof(*v))) == NULL) {
			sm_free(v);
			return (sm_err_set(err, SM_ENOMEM, "out of memory"));
		}
		v = nv;
		for (size_t k = 0; k < pr->n_profiles; k++) {
			const Smolder__V1__ProfileRef *x = pr->profiles[k];

			if (x->id.len != 16)
				continue;
			v[n++] = (struct qry_pref){ x->fp, x->bucket_t,
			    x->id.data };
		}
	}
	if (n > 0)
		qsort(v, n, sizeof(*v), qry_pref_cmp);
	for (size_t i = 0; i < n; i++)
		if (w == 0 || qry_pref_cmp(&v[w - 1], &v[i]) != 0)
			v[w++] = v[i];
	*refs = v;
	*nrefs = w;
	return (0);
}

int
qry_profile_merge(struct qry_query *x, const Smolder__V1__Select *sel,
    char *const *ids, size_t nids, struct sm_mtree *m, struct sm_err *err)
{
	Smolder__V1__Request rq = SMOLDER__V1__REQUEST__INIT;
	Smolder__V1__ProfilesRequest pr = SMOLDER__V1__PROFILES_REQUEST__INIT;
	Smolder__V1__Select lsel = *sel, nsel;
	struct qry_bucket *w = NULL;
	struct qry_pref *refs = NULL;
	struct qry_fan f;
	uint8_t *want = NULL;
	size_t nwant = 0, nrefs = 0, nw = 0;
	bool empty, open = true;
	int rv;

	qry_fan_init(&f);
	if ((rv = ps_ids(ids, nids, &want, &nwant, err)) != 0 ||
	    (rv = qry_limit_range(x->q, lsel.tenant, &lsel.start_ms,
	    &lsel.end_ms, NULL, &empty, err)) != 0 || empty)
		goto out;
	/* picks and resolutions are the plan's business, not the list's */
	lsel.picked = 0;
	lsel.n_picks = 0;
	lsel.picks = NULL;
	lsel.n_resolution = 0;
	lsel.resolution = NULL;
	pr.select = &lsel;
	rq.method_case = SMOLDER__V1__REQUEST__METHOD_PROFILES;
	rq.profiles = &pr;
	if ((rv = qry_fanout_same(x->q, &f, &rq, "profiles", err)) != 0 ||
	    (rv = ps_collect(&f, &refs, &nrefs, err)) != 0)
		goto out;
	if ((w = sm_calloc(SM_MAX(nrefs, 1), sizeof(*w))) == NULL) {
		rv = sm_err_set(err, SM_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t lo = 0, hi; lo < nrefs; lo = hi) {
		size_t sel_n = 0;
		const uint8_t *one = NULL;

		for (hi = lo; hi < nrefs && refs[hi].fp == refs[lo].fp &&
		    refs[hi].t == refs[lo].t; hi++) {
			if (ps_wanted(want, nwant, refs[hi].id)) {
				sel_n++;
				one = refs[hi].id;
			}
		}
		if (sel_n == 0)
			continue;
		if (sel_n < hi - lo) {
			char u[37];

			sm_uuid_format(one, u);
			rv = sm_err_set(err, SM_EUNSUPPORTED, "profile_id_"
			    "selector: profile %s shares its series' 10 s "
			    "bucket with %zu other upload(s) not selected; "
			    "Smolder keeps the stacks of a series merged per "
			    "10 s bucket, so it cannot answer that profile "
			    "alone", u, hi - lo - sel_n);
			goto out;
		}
		w[nw++] = (struct qry_bucket){ refs[lo].fp, refs[lo].t };
	}
	if (nw == 0)
		goto out;           /* nothing selected: the empty tree */
	/* only the wanted buckets' range, read raw (bucket starts) */
	nsel = *sel;
	nsel.start_ms = w[0].t;
	nsel.end_ms = w[0].t + 1;
	for (size_t i = 1; i < nw; i++) {
		nsel.start_ms = SM_MIN(nsel.start_ms, w[i].t);
		nsel.end_ms = SM_MAX(nsel.end_ms, w[i].t + 1);
	}
	qry_fan_close(&f, true);
	open = false;
	x->only = w;
	x->nonly = nw;
	rv = qry_merge(x, &nsel, m, err);
	x->only = NULL;
	x->nonly = 0;
out:
	if (open)
		qry_fan_close(&f, true);
	sm_free(refs);
	sm_free(w);
	sm_free(want);
	return (rv);
}
