/* prom.h - writer for the Prometheus text exposition format 0.0.4.
 *
 * Families start with HELP and TYPE lines; label values are escaped
 * (backslash, double quote, newline).  Output goes into a capped buffer. */
#ifndef SHOAL_PROM_H
#define SHOAL_PROM_H

#include "../../common/buf.h"

/* Writes the "# HELP" and "# TYPE" lines of a family.  `type` is "counter",
 * "gauge" or "histogram".  Returns 0, or -1 if the buffer cap is reached. */
int prom_family(struct buf *b, const char *name, const char *type, const char *help);

/* Writes one sample line: name{k1="v1",...} value.  `labels` holds key,value
 * pairs and ends with NULL (or is NULL for no labels).  Infinite values are
 * written as +Inf/-Inf.  Returns 0, or -1 if the buffer cap is reached. */
int prom_sample(struct buf *b, const char *name, const char *const *labels, double value);

#endif
