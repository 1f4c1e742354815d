/* loadgen.h - what loadgen.c (the simulated agents and their event loop)
 * and lg_report.c (its table and JSON line) share: the agents, the jobs
 * and the run's state. */
#ifndef LG_LOADGEN_H
#define LG_LOADGEN_H

#include <netinet/in.h>
#include <stdint.h>

#include "lg_http.h"
#include "lg_options.h"
#include "lg_stats.h"
#include "lg_timer.h"

#define HEARTBEAT_TIMEOUT_S 10.0   /* the agent's heartbeat call timeout */
#define POLL_GRACE_S 15.0          /* the agent waits wait + 15 s for a long-poll's answer */
#define PROGRESS_TIMEOUT_S 10.0
#define REGISTER_TIMEOUT_S 30.0
#define ADMIN_TIMEOUT_S 120.0
#define POLL_RETRY_S 1.0           /* the agent's pause after a failed poll */
#define REGISTER_DEADLINE_S 300.0  /* the whole registration phase */
#define STEPS 1000000              /* training.steps of the load's jobs: they never finish */
#define EVENTS 256

enum role { R_REGISTER, R_HEARTBEAT, R_POLL, R_PROGRESS, R_ADMIN };
enum kind { K_REGISTER, K_HEARTBEAT, K_ASSIGNMENT, K_LONGPOLL, K_WAKE, K_PROGRESS, K_N };
enum timer_what { T_HEARTBEAT, T_POLL, T_PROGRESS, T_ADMIN, T_DEADLINE };


struct agent {
    int index;
    int64_t node_id;
    char token[160];
    struct sockaddr_in source;
    struct lg_conn hb, poll, prog;
    unsigned long hb_gen, poll_gen, prog_gen;   /* a timer is live while its gen matches */
    unsigned long posted_gen;   /* prog_gen when the progress post in flight was sent */
    /* the assignment as the agent knows it; known = 0 before the first answer */
    int known;
    int64_t job;
    long epoch;
    int recovering;
    int stage, replica, stages;
    int training;           /* posting progress for (job, epoch) */
    long long step;         /* the next step to report */
    int64_t wake_job;       /* the wake job's node: its id; 0: another node */
    double woke_at;         /* monotonic s the long-poll told it the job was cancelled; 0: not yet */
};


struct job {
    int64_t id;
    int first_agent;        /* plans name agents first_agent .. first_agent + tasklets - 1 */
    double plan_sent;       /* monotonic s; 0: not yet */
    double plan_ms;         /* how long the plan POST took */
    double cancel_sent, cancel_ms;   /* the wake job: its cancel, while the agents run */
    double answered_at;     /* monotonic s the cancel's answer came */
    int planned;
};

struct loadgen {
    struct lg_options o;
    int epfd;
    struct agent *agents;
    struct lg_timers timers;
    struct lg_kind kinds[K_N];      /* the measured window (and every registration and wake) */
    struct lg_kind warm[K_N];       /* the warm-up: agents starting, plans going out */
    enum { PH_SETUP, PH_WARMUP, PH_WINDOW, PH_DONE } phase;
    double t_start;         /* monotonic s the agents began starting */
    double t0, t_end;       /* the measured window, monotonic s */
    double cpu0, cpu1;      /* this process's CPU s when it opened and closed */
    double admin_done_at;   /* monotonic s the wake job's cancel was answered (or failed) */
    struct lg_hist second;  /* --timeline: this second's heartbeats */
    double second_start;
    long long second_errors;
    long long reconnects;   /* requests sent again after a kept-alive connection died */
    /* registration */
    struct lg_conn *reg;
    int *reg_agent;         /* the agent each registration connection is registering */
    int n_reg;              /* registration connections */
    int next_register, registered, register_until;   /* agents [0, register_until) are wanted */
    /* the operator's side: jobs and their plans */
    struct lg_conn admin;
    struct job *jobs;
    int n_jobs, tasklets;   /* jobs made, the wake job included; tasklets of each */
    int admin_done, admin_failed;
    struct sockaddr_in admin_source;
};

/* Monotonic s. */
double now_s(void);
/* CPU time this process has used, s. */
double cpu_s(void);

/* Prints the warm-up's and the window's tables and the {"bench":"load"}
 * JSON line (stdout). */
void lg_report(struct loadgen *lg, double register_s, double warmup_s);

#endif
