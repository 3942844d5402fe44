# Monitoring as code: log-based metrics over the functions' structured log lines, alert
# policies, and one dashboard. Nothing here runs in the functions: the metrics read the JSON
# lines they already write to stdout (shared/kernel/logs.py), whose `event` field and fields
# are declared once in shared/kernel/events.py. tests/unit/test_monitoring.py refuses a filter
# naming an event or a jsonPayload field not declared there, and a reference to a log-based
# metric not defined here.
#
# Alerts are always created. With alert_notification_channels empty (the default) they notify
# nobody, but still open incidents in the console and on the dashboard; give channel ids to be
# told. The budget alert exists only when gpu_daily_budget_usd is set.

locals {
  # The functions' log lines: a 2nd gen function is a Cloud Run service of the same name, and
  # Cloud Run turns each JSON line on stdout into a jsonPayload.
  flexjobs_services = concat([for f in values(local.functions) : f.name], ["flexjobs-status-page"])
  log_source = format(
    "resource.type=\"cloud_run_revision\" AND (%s)",
    join(" OR ", [for s in local.flexjobs_services : "resource.labels.service_name=\"${s}\""]),
  )
  # The same services in a Monitoring filter (their names are letters and hyphens only).
  service_match = "monitoring.regex.full_match(\"${join("|", local.flexjobs_services)}\")"

  # Terminal job states (shared/domain/model/states.py): the ends a request can reach.
  end_states = ["SUCCEEDED", "FAILED", "CANCELLED"]

  # A log-based metric's type in Monitoring, and its name in PromQL (the first "/" becomes
  # ":", every other "/" and "." a "_"; a distribution adds _sum, _count or _bucket).
  user_metric = "logging.googleapis.com/user"
  promql_metric = {
    gpu_seconds = "logging_googleapis_com:user_${replace(google_logging_metric.gpu_seconds.name, "/", "_")}_sum"
    cost_usd    = "logging_googleapis_com:user_${replace(google_logging_metric.cost_usd.name, "/", "_")}_sum"
  }

  # How long the tick may be silent before it is an incident (it runs every minute).
  tick_silence = "300s"
}

# --- Log-based metrics -------------------------------------------------------------------------

resource "google_logging_metric" "jobs_ended" {
  name        = "flexjobs/jobs_ended"
  description = "Requests that reached an end state, by state."
  filter      = "${local.log_source} AND jsonPayload.event=\"job.state_changed\" AND (${join(" OR ", [for s in local.end_states : "jsonPayload.state=\"${s}\""])})"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
    labels {
      key         = "state"
      value_type  = "STRING"
      description = "The end state: SUCCEEDED, FAILED or CANCELLED."
    }
  }
  label_extractors = {
    state = "EXTRACT(jsonPayload.state)"
  }
}

resource "google_logging_metric" "preemptions" {
  name        = "flexjobs/preemptions"
  description = "Attempts that ended preempted (the capacity was reclaimed), by strategy."
  filter      = "${local.log_source} AND jsonPayload.event=\"job.preempted\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
    labels {
      key         = "strategy"
      value_type  = "STRING"
      description = "The attempt's strategy: FLEX_START, SPOT or STANDARD."
    }
  }
  label_extractors = {
    strategy = "EXTRACT(jsonPayload.strategy)"
  }
}

resource "google_logging_metric" "recovery_gap" {
  name        = "flexjobs/recovery_gap"
  description = "Seconds from the end of an attempt to the submission of the next one."
  # Only a retry's submission carries recoveryGapSeconds; a numeric comparison matches only
  # lines that have the field.
  filter          = "${local.log_source} AND jsonPayload.event=\"job.submitted\" AND jsonPayload.recoveryGapSeconds>=0"
  value_extractor = "EXTRACT(jsonPayload.recoveryGapSeconds)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "s"
  }
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 24
      growth_factor      = 2
      scale              = 1 # 1 s up to about 97 days
    }
  }
}

resource "google_logging_metric" "queue_wait" {
  name        = "flexjobs/queue_wait"
  description = "Seconds each ended attempt waited for capacity before it ran, by strategy."
  # Logged once per attempt, on the change that ends it (with what it used and cost), so an
  # attempt that never ran (max wait expired) counts too.
  filter          = "${local.log_source} AND jsonPayload.event=\"job.state_changed\" AND jsonPayload.queueSeconds>=0"
  value_extractor = "EXTRACT(jsonPayload.queueSeconds)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "s"
    labels {
      key         = "strategy"
      value_type  = "STRING"
      description = "The attempt's strategy."
    }
  }
  label_extractors = {
    strategy = "EXTRACT(jsonPayload.strategy)"
  }
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 24
      growth_factor      = 2
      scale              = 1
    }
  }
}

resource "google_logging_metric" "gpu_seconds" {
  name            = "flexjobs/gpu_seconds"
  description     = "GPU-seconds each ended attempt ran (GPUs x running time), by strategy; its sum / 3600 is GPU-hours."
  filter          = "${local.log_source} AND jsonPayload.event=\"job.state_changed\" AND jsonPayload.gpuSeconds>=0"
  value_extractor = "EXTRACT(jsonPayload.gpuSeconds)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "s"
    labels {
      key         = "strategy"
      value_type  = "STRING"
      description = "The attempt's strategy."
    }
  }
  label_extractors = {
    strategy = "EXTRACT(jsonPayload.strategy)"
  }
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 32
      growth_factor      = 2
      scale              = 1
    }
  }
}

resource "google_logging_metric" "cost_usd" {
  name            = "flexjobs/cost_usd"
  description     = "Estimated cost (USD, the price table's list prices) of each ended attempt, by strategy. Unpriced attempts carry no cost and are left out."
  filter          = "${local.log_source} AND jsonPayload.event=\"job.state_changed\" AND jsonPayload.costUsd>=0"
  value_extractor = "EXTRACT(jsonPayload.costUsd)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "{USD}"
    labels {
      key         = "strategy"
      value_type  = "STRING"
      description = "The attempt's strategy."
    }
  }
  label_extractors = {
    strategy = "EXTRACT(jsonPayload.strategy)"
  }
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 32
      growth_factor      = 2
      scale              = 0.01 # a cent up to about 43 million dollars
    }
  }
}

resource "google_logging_metric" "rejections" {
  name        = "flexjobs/rejections"
  description = "Requests refused for good (recorded in rejections)."
  filter      = "${local.log_source} AND jsonPayload.event=\"job.rejected\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_logging_metric" "admission_waits" {
  name        = "flexjobs/admission_waits"
  description = "Requests that started waiting in an admission queue, by queue."
  filter      = "${local.log_source} AND jsonPayload.event=\"job.waiting\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
    labels {
      key         = "queue"
      value_type  = "STRING"
      description = "The admission queue."
    }
  }
  label_extractors = {
    queue = "EXTRACT(jsonPayload.queue)"
  }
}

resource "google_logging_metric" "admission_wait" {
  name            = "flexjobs/admission_wait"
  description     = "Seconds each admitted request waited in its admission queue, by queue."
  filter          = "${local.log_source} AND jsonPayload.event=\"job.admitted\" AND jsonPayload.waitedSeconds>=0"
  value_extractor = "EXTRACT(jsonPayload.waitedSeconds)"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "DISTRIBUTION"
    unit        = "s"
    labels {
      key         = "queue"
      value_type  = "STRING"
      description = "The admission queue."
    }
  }
  label_extractors = {
    queue = "EXTRACT(jsonPayload.queue)"
  }
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 24
      growth_factor      = 2
      scale              = 1 # 1 s up to about 97 days
    }
  }
}

resource "google_logging_metric" "ticks" {
  name        = "flexjobs/ticks"
  description = "Scheduler ticks that finished their sweep."
  filter      = "${local.log_source} AND jsonPayload.event=\"tick.done\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

# --- Alert policies ----------------------------------------------------------------------------

# A message in a dead-letter subscription is a request, hint, tick or checkpoint event that
# failed every delivery (docs/deploy.md, "See the dead letters"). Pulling without acknowledging
# keeps it counted, so the incident stays open until someone removes what they fixed.
resource "google_monitoring_alert_policy" "dead_letters" {
  for_each = local.push_paths

  display_name          = "flexjobs: dead letters in ${each.value.topic}-dead-letter"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "${google_pubsub_subscription.dead_letter_inspect[each.key].name} holds messages"
    condition_threshold {
      filter          = "resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=\"${google_pubsub_subscription.dead_letter_inspect[each.key].name}\" AND metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"
      aggregations {
        alignment_period   = "300s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "Messages failed ${var.max_delivery_attempts} deliveries and were dead-lettered. Look: `gcloud pubsub subscriptions pull ${google_pubsub_subscription.dead_letter_inspect[each.key].name} --limit=10`; after fixing the cause, publish their data to `${each.value.topic}` again and remove them with `--auto-ack`."
  }

  depends_on = [google_project_service.apis]
}

# A push subscription whose oldest message waits long: its function keeps failing it (or is
# at its instance limit), and the deliveries are on their way to the dead-letter topic.
resource "google_monitoring_alert_policy" "push_backlog" {
  for_each = local.push_paths

  display_name          = "flexjobs: ${each.value.topic}-push is falling behind"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "oldest unacknowledged message older than ${var.push_backlog_age_seconds} s"
    condition_threshold {
      filter          = "resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=\"${google_pubsub_subscription.push[each.key].name}\" AND metric.type=\"pubsub.googleapis.com/subscription/oldest_unacked_message_age\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.push_backlog_age_seconds
      duration        = "300s"
      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "`${local.functions[each.value.function].name}` has not acknowledged a message of `${each.value.topic}` for over ${var.push_backlog_age_seconds} s. Its logs say why (the lines `transient fault, redelivery requested`)."
  }

  depends_on = [google_project_service.apis]
}

# Each function's share of 5xx answers. A push function answers 5xx on purpose for a transient
# fault (Pub/Sub then redelivers), so only a sustained share over the threshold is an incident.
resource "google_monitoring_alert_policy" "function_errors" {
  display_name          = "flexjobs: a function answers 5xx"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "5xx share of a function's requests above ${var.error_ratio_threshold}"
    condition_threshold {
      filter             = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=${local.service_match} AND metric.type=\"run.googleapis.com/request_count\" AND metric.labels.response_code_class=\"5xx\""
      denominator_filter = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=${local.service_match} AND metric.type=\"run.googleapis.com/request_count\""
      comparison         = "COMPARISON_GT"
      threshold_value    = var.error_ratio_threshold
      duration           = "900s"
      # One ratio per function, whatever its revisions.
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
      denominator_aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A flexjobs function answered 5xx to more than ${var.error_ratio_threshold * 100}% of its requests for 15 minutes. Its error lines (`severity>=ERROR`) say why."
  }

  depends_on = [google_project_service.apis]
}

# The tick reconciles every job, runs due retries and sends what failed to publish: without
# it, nothing recovers.
resource "google_monitoring_alert_policy" "tick_silent" {
  display_name          = "flexjobs: the scheduler tick is silent"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "no tick done for ${local.tick_silence}"
    condition_absent {
      filter   = "resource.type=\"cloud_run_revision\" AND metric.type=\"${local.user_metric}/${google_logging_metric.ticks.name}\""
      duration = local.tick_silence
      # Summed across revisions: a deploy starts a new revision, and the old one's series
      # ending is not the tick ending.
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "No `tick done` line for ${local.tick_silence}. Check the Cloud Scheduler job `${google_cloud_scheduler_job.tick.name}`, the subscription `${var.scheduler_ticks_topic}-push` and the logs of `${local.functions.handle_scheduler_tick.name}`."
  }

  depends_on = [google_project_service.apis]
}

# Estimated GPU spend over the last 24 hours, from the cost metric (the sum of what every
# attempt that ended in the window cost). A PromQL condition: a threshold condition cannot
# sum a distribution's values.
resource "google_monitoring_alert_policy" "gpu_budget" {
  count = var.gpu_daily_budget_usd == null ? 0 : 1

  display_name          = "flexjobs: GPU spend over the daily budget"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels

  conditions {
    display_name = "estimated cost of the attempts ended in the last 24 h above ${coalesce(var.gpu_daily_budget_usd, 0)} USD"
    condition_prometheus_query_language {
      query               = "sum(increase(${local.promql_metric.cost_usd}{monitored_resource=\"cloud_run_revision\"}[1d])) > ${coalesce(var.gpu_daily_budget_usd, 0)}"
      duration            = "0s"
      evaluation_interval = "300s"
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "The estimated cost (list prices, flexjobs' price table) of the attempts that ended in the last 24 hours is over ${coalesce(var.gpu_daily_budget_usd, 0)} USD. The dashboard shows it by strategy; the status page by request."
  }

  depends_on = [google_project_service.apis]
}

# --- Dashboard ---------------------------------------------------------------------------------

locals {
  # A chart of a log-based metric's rate, summed by its labels.
  dashboard_widgets = [
    {
      title = "Requests ended, by state (per minute)"
      xyChart = {
        dataSets = [{
          plotType = "STACKED_BAR"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"${local.user_metric}/${google_logging_metric.jobs_ended.name}\" AND resource.type=\"cloud_run_revision\""
              aggregation = {
                alignmentPeriod    = "300s"
                perSeriesAligner   = "ALIGN_RATE"
                crossSeriesReducer = "REDUCE_SUM"
                groupByFields      = ["metric.label.state"]
              }
            }
          }
        }]
      }
    },
    {
      title = "Preemptions, by strategy (per minute)"
      xyChart = {
        dataSets = [{
          plotType = "STACKED_BAR"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"${local.user_metric}/${google_logging_metric.preemptions.name}\" AND resource.type=\"cloud_run_revision\""
              aggregation = {
                alignmentPeriod    = "300s"
                perSeriesAligner   = "ALIGN_RATE"
                crossSeriesReducer = "REDUCE_SUM"
                groupByFields      = ["metric.label.strategy"]
              }
            }
          }
        }]
      }
    },
    {
      title = "Recovery gap: end of an attempt to the next submission (p50, p95, s)"
      xyChart = {
        dataSets = [for p in ["50", "95"] : {
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"${local.user_metric}/${google_logging_metric.recovery_gap.name}\" AND resource.type=\"cloud_run_revision\""
              aggregation = {
                alignmentPeriod    = "3600s"
                perSeriesAligner   = "ALIGN_DELTA"
                crossSeriesReducer = "REDUCE_PERCENTILE_${p}"
              }
            }
          }
        }]
      }
    },
    {
      title = "Queue wait of ended attempts, by strategy (p95, s)"
      xyChart = {
        dataSets = [{
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"${local.user_metric}/${google_logging_metric.queue_wait.name}\" AND resource.type=\"cloud_run_revision\""
              aggregation = {
                alignmentPeriod    = "3600s"
                perSeriesAligner   = "ALIGN_DELTA"
                crossSeriesReducer = "REDUCE_PERCENTILE_95"
                groupByFields      = ["metric.label.strategy"]
              }
            }
          }
        }]
      }
    },
    {
      title = "GPU-hours of ended attempts, by strategy (per hour)"
      xyChart = {
        dataSets = [{
          plotType = "STACKED_BAR"
          timeSeriesQuery = {
            prometheusQuery = "sum by (strategy) (increase(${local.promql_metric.gpu_seconds}{monitored_resource=\"cloud_run_revision\"}[1h])) / 3600"
          }
        }]
      }
    },
    {
      title = "Estimated cost of ended attempts, by strategy (USD per hour)"
      xyChart = {
        dataSets = [{
          plotType = "STACKED_BAR"
          timeSeriesQuery = {
            prometheusQuery = "sum by (strategy) (increase(${local.promql_metric.cost_usd}{monitored_resource=\"cloud_run_revision\"}[1h]))"
          }
        }]
      }
    },
    {
      title = "Rejections and ticks (per minute)"
      xyChart = {
        dataSets = [for m in [google_logging_metric.rejections, google_logging_metric.ticks] : {
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"${local.user_metric}/${m.name}\" AND resource.type=\"cloud_run_revision\""
              aggregation = {
                alignmentPeriod    = "300s"
                perSeriesAligner   = "ALIGN_RATE"
                crossSeriesReducer = "REDUCE_SUM"
              }
            }
          }
        }]
      }
    },
    {
      title = "Dead letters waiting, by subscription"
      xyChart = {
        dataSets = [{
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=monitoring.regex.full_match(\".*-dead-letter-inspect\")"
              aggregation = {
                alignmentPeriod  = "300s"
                perSeriesAligner = "ALIGN_MAX"
              }
            }
          }
        }]
      }
    },
    {
      title = "Oldest unacknowledged message of each push subscription (s)"
      xyChart = {
        dataSets = [{
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter = "metric.type=\"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=monitoring.regex.full_match(\".*-push\")"
              aggregation = {
                alignmentPeriod  = "60s"
                perSeriesAligner = "ALIGN_MAX"
              }
            }
          }
        }]
      }
    },
    {
      title = "5xx share of each function's requests"
      xyChart = {
        dataSets = [{
          plotType = "LINE"
          timeSeriesQuery = {
            timeSeriesFilterRatio = {
              numerator = {
                filter = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND metric.label.response_code_class=\"5xx\" AND resource.label.service_name=${local.service_match}"
                aggregation = {
                  alignmentPeriod    = "300s"
                  perSeriesAligner   = "ALIGN_RATE"
                  crossSeriesReducer = "REDUCE_SUM"
                  groupByFields      = ["resource.label.service_name"]
                }
              }
              denominator = {
                filter = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND resource.label.service_name=${local.service_match}"
                aggregation = {
                  alignmentPeriod    = "300s"
                  perSeriesAligner   = "ALIGN_RATE"
                  crossSeriesReducer = "REDUCE_SUM"
                  groupByFields      = ["resource.label.service_name"]
                }
              }
            }
          }
        }]
      }
    },
  ]
}

resource "google_monitoring_dashboard" "flexjobs" {
  dashboard_json = jsonencode({
    displayName = "flexjobs"
    gridLayout = {
      columns = 2
      widgets = local.dashboard_widgets
    }
  })

  depends_on = [google_project_service.apis]
}
