# sched_instances.sh - the generated networks of make bench-sched and
# bench-sched-long (sourced): which network seeds at each size, and the
# long runs' budget.
network_seeds() {
    case $1 in
        64) echo "1 2 3" ;;
        128|256) echo "1 2" ;;
        *) echo "1" ;;
    esac
}

long_budget_ms() {
    if [ "$1" -ge 1024 ]; then echo 600000; else echo 300000; fi
}
