/* svg.h - a small SVG writer for the benches' --svg plots: line charts
 * (series of x, y points) and grouped bar charts, stacked as panels of one
 * document. Every series is a <g class="series" data-name="NAME"> so that
 * tests (and people) can find it; text is XML-escaped.
 *
 *   svg_doc *d = svg_open(path, 760, 2 * 300, "title");  // NULL: error printed
 *   svg_lines(d, 0, "panel title", "x label", "y label", series, n);
 *   svg_bars(d, 1, "panel title", "y label", groups, n_groups, names, values, n_series);
 *   return svg_close(d);                                   // 0, or -1 (printed)
 *
 * Panels are PANEL_H pixels high, stacked from the top under the title.
 * Values that are not finite or (for bars) not > 0 are left out: a missing
 * figure is drawn as no point or no bar, never as zero.
 */
#ifndef PL_BENCH_SVG_H
#define PL_BENCH_SVG_H

#include <stddef.h>

#define SVG_PANEL_H 300

typedef struct {
    const char *name;
    const double *x, *y; /* n points */
    size_t n;
} svg_series;

typedef struct svg_doc svg_doc;

/* Creates path for a document of n_panels panels; NULL (message on stderr)
 * if it cannot be written. */
svg_doc *svg_open(const char *path, int n_panels, const char *title);
/* Panel i: one polyline (with a dot per point) per series, linear axes from
 * 0 (y) and from 0 (x; or from the smallest x if it is negative). */
void svg_lines(svg_doc *d, int panel, const char *title, const char *xlabel, const char *ylabel, const svg_series *s,
               int n_series);
/* Panel i: for each group, one bar per series: values[series * n_groups + group]. */
void svg_bars(svg_doc *d, int panel, const char *title, const char *ylabel, const char *const *groups, int n_groups,
              const char *const *series, const double *values, int n_series);
/* Ends and closes the document: 0, or -1 with a message if a write failed. */
int svg_close(svg_doc *d);

#endif
