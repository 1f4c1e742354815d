/* lg_report.c - the load generator's report (see loadgen.h): one table per
 * phase, one row per request kind, and one JSON line. */
#include <stdio.h>

#include "loadgen.h"

static const char *const kind_names[K_N] = { "register", "heartbeat", "assignment", "longpoll", "wake",
                                              "progress" };

/* The table of one set of kinds; `only_agent` leaves out register and wake. */
static void report_table(struct lg_kind *set, int only_agent, double register_s, double secs)
{
    lg_kind_header(stdout);
    for (int k = 0; k < K_N; k++) {
        set[k].name = kind_names[k];
        if (!only_agent || (k != K_REGISTER && k != K_WAKE))
            lg_kind_row(stdout, &set[k], k == K_REGISTER ? register_s : secs);
    }
    for (int k = 0; k < K_N; k++)
        if (set[k].first_error[0] && (!only_agent || (k != K_REGISTER && k != K_WAKE)))
            printf("first %s error: %s\n", kind_names[k], set[k].first_error);
}

static void report_json(struct lg_kind *set, int only_agent, double register_s, double secs)
{
    const char *sep = "";
    for (int k = 0; k < K_N; k++) {
        if (only_agent && (k == K_REGISTER || k == K_WAKE))
            continue;
        printf("%s", sep);
        lg_kind_json(stdout, &set[k], k == K_REGISTER ? register_s : secs);
        sep = ",";
    }
}

void lg_report(struct loadgen *lg, double register_s, double warmup_s)
{
    double cpu = cpu_s(), window_cpu = (lg->cpu1 > 0 ? lg->cpu1 : cpu) - lg->cpu0;
    int open = 0, training = 0;
    for (int i = 0; i < lg->o.agents; i++) {
        struct agent *ag = &lg->agents[i];
        open += (ag->hb.fd >= 0) + (ag->poll.fd >= 0) + (ag->prog.fd >= 0);
        training += ag->training;
    }
    double window = lg->o.duration_s > 0 ? lg->o.duration_s : 1e-9;
    const struct job *wj = lg->o.wake && lg->n_jobs ? &lg->jobs[lg->n_jobs - 1] : NULL;
    printf("\nloadgen: %d agents, heartbeat every %.1f s, long-poll wait %d s, %d jobs x %d tasklets posting "
           "progress every %.1f s (%d training)%s\n",
           lg->o.agents, lg->o.heartbeat_s, lg->o.poll_wait_s, lg->n_jobs - (wj != NULL), lg->tasklets,
           lg->o.progress_s, training, wj ? ", one more job cancelled during the warm-up" : "");
    printf("plans (ms, made before the other agents registered):");
    for (int j = 0; j < lg->n_jobs; j++)
        printf(" %.0f", lg->jobs[j].plan_ms);
    printf("%s", lg->n_jobs ? "" : " none");
    if (wj)
        printf("; cancel: %.0f ms", wj->cancel_ms);
    printf("\nwarm-up, %.1f s (agents starting over %.1f s, the cancel):\n", warmup_s, lg->o.ramp_s);
    report_table(lg->warm, 1, register_s, warmup_s);
    printf("measured window, %.1f s (register: all %d in %.1f s; longpoll: held time incl. the wait;\n"
           "wake: the cancel's answer -> its nodes' long-polls bringing it, during the warm-up):\n",
           lg->o.duration_s, lg->o.agents, register_s);
    report_table(lg->kinds, 0, register_s, window);
    printf("connections open at the end: %d; re-sent on a fresh connection: %lld; loadgen CPU: %.1f s "
           "(%.1f s in the window)\n", open, lg->reconnects, cpu, window_cpu);
    printf("{\"bench\":\"load\",\"label\":\"%s\",\"agents\":%d,\"duration_s\":%.1f,\"warmup_s\":%.1f,"
           "\"ramp_s\":%.1f,\"heartbeat_interval_s\":%.2f,\"poll_wait_s\":%d,\"jobs\":%d,\"tasklets_per_job\":%d,"
           "\"training_agents\":%d,\"progress_interval_s\":%.2f,\"register_s\":%.2f,\"connections\":%d,"
           "\"reconnects\":%lld,\"loadgen_cpu_s\":%.2f,\"loadgen_window_cpu_s\":%.2f,\"cancel_ms\":%.1f,\"plan_ms\":[",
           lg->o.label, lg->o.agents, lg->o.duration_s, warmup_s, lg->o.ramp_s, lg->o.heartbeat_s, lg->o.poll_wait_s,
           lg->n_jobs - (wj != NULL), lg->tasklets, training, lg->o.progress_s, register_s, open, lg->reconnects, cpu,
           window_cpu, wj ? wj->cancel_ms : 0.0);
    for (int j = 0; j < lg->n_jobs; j++)
        printf("%s%.1f", j ? "," : "", lg->jobs[j].plan_ms);
    printf("],\"kinds\":{");
    report_json(lg->kinds, 0, register_s, window);
    printf("},\"warmup\":{");
    report_json(lg->warm, 1, register_s, warmup_s);
    printf("}}\n");
    fflush(stdout);
}
