/*
 * scraper.h -- the scraper component (-target=scraper, part of
 * -target=all): pull mode.  It fetches pprof endpoints itself, as
 * Prometheus scrapes metrics, and uploads what it fetched through the
 * distributor, so a Go service with net/http/pprof needs no SDK.
 *
 * Serves:
 *   GET /api/v1/targets   every target: its job, labels, URL, health and,
 *                         per profile, the last scrape (time, duration,
 *                         error), the next one and counts (JSON, in
 *                         Prometheus' /api/v1/targets shape where it has
 *                         one; read scope)
 *   GET /targets          the same as an HTML table
 *   /metrics families     smolder_scraper_targets{job},
 *                         smolder_scraper_scrapes_total{job,profile,result},
 *                         smolder_scraper_uploads_total{result},
 *                         smolder_scraper_delta_state_bytes
 * Per-target health is in the API, not in metric families: targets come
 * and go (file discovery, pods), and a family's children live as long
 * as the process.
 *
 * Configuration: the YAML file of -scrape.config-file (scr_int.h has its
 * shape), reloaded when it changes (common/watch.h, checked every
 * -scrape.config-reload-period); without the flag
 * the component runs idle.  A file that does not load keeps the previous
 * configuration (logged).  Discovery: static_configs, and file_sd_configs,
 * dns_sd_configs (dns.c) and kubernetes_sd_configs (k8s.c: annotated
 * pods) read again every refresh_interval, with no lock held;
 * relabel_configs replace, keep, drop and labelmap.  A target may carry
 * __profile_path_<name> and __profile_enabled_<name> labels (from pod
 * annotations, or relabeling) that override its job's profile settings.  A target's identity is its job, address and labels: a
 * reload that keeps them keeps its schedule and delta state.
 *
 * Scraping: each (target, profile) every scrape_interval, at an offset
 * within the interval derived from the target's identity (targets spread
 * over the interval, and a target keeps its phase across restarts), by a
 * pool of -scraper.concurrency workers; a scrape still running when the
 * next is due skips that one (counted, result "skipped").  process_cpu
 * asks ?seconds=N.  Cumulative profiles (heap allocations, mutex, block)
 * become deltas (delta.h); when a target serves godeltaprof's delta_path
 * that is fetched instead and stored as it comes.  An answer over
 * -scraper.max-profile-bytes (inflated) fails the scrape.
 *
 * Uploads: a push.v1 Push per scrape to -scraper.push-url (default: this
 * process's own HTTP listener), with the target's labels, __name__ the
 * profile's name, X-Scope-OrgID the job's tenant_id (or, with
 * -scraper.push-api-key-file, the key's tenant: Authorization: Bearer),
 * and an id derived from the target, profile and scrape time, so a
 * retried upload is stored once.  One retry on a transport error or 5xx;
 * a failed upload puts the delta state back (delta.h), so the next one
 * carries both intervals.
 *
 * Memory: the delta states of all targets together are bounded by
 * -scraper.max-delta-state-bytes; a scrape whose state would pass it
 * fails (the target's error says so) and its state is dropped, so it
 * primes again -- reported, never silently thinned.
 *
 * Sharing (-scraper.peers, common/peers.h): scrapers given the same
 * configuration and each other's URLs share its targets.  The owner of a
 * target is the healthy scraper with the highest hash of (its id, the
 * target's identity): rendezvous hashing, so a scraper that goes moves
 * only its own targets.  Scrape times are slots aligned to the wall
 * clock (the target's phase within the interval), the same in every
 * scraper; a scraper that gains a target starts at the next slot, so a
 * target is never scraped twice in one slot by two scrapers, and a dead
 * scraper's targets are scraped again within about one interval plus
 * the time its peers take to see it gone (two probe periods).  Each
 * scraper keeps the delta state of its own targets: one that gains a
 * target primes it first.
 *
 * Lifecycle: create (routes), start (threads; the config loaded: a bad
 * file at start is an error), stop (threads joined, in-flight scrapes
 * finished), free.  Locking: one mutex over the targets and
 * configuration; fetching, delta work and uploads run outside it, a
 * (target, profile)'s delta state owned by its one running scrape.
 */
#ifndef SCRAPER_H
#define SCRAPER_H

#include <stdint.h>

#include "common/http.h"
#include "common/sm.h"

struct scraper_cfg {
	const char *config_file;     /* "": none, idle */
	int64_t reload_ms;           /* how often the file is checked */
	const char *push_url;        /* base URL of a distributor */
	const char *push_key_file;   /* API key for the uploads; "" none */
	const char *peers;           /* -scraper.peers; "" none */
	int64_t peers_period_ms, peers_timeout_ms;
	uint32_t concurrency;        /* workers */
	int64_t max_state_bytes;
	int64_t max_profile_bytes;
};

struct scraper;

int scraper_create(const struct scraper_cfg *cfg, struct sm_http *http,
    struct scraper **out, struct sm_err *err);

/* The header of /ready by which scrapers know each other, and this
 * scraper's value of it (random per process). */
#define SCRAPER_PEER_HEADER "X-Smolder-Scraper"
const char *scraper_id(const struct scraper *s);
int scraper_start(struct scraper *s, struct sm_err *err);
void scraper_stop(struct scraper *s);
void scraper_free(struct scraper *s);

#endif /* SCRAPER_H */
