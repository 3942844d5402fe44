# The four event-driven entry points of functions/main.py, each a Cloud Functions (2nd gen)
# function with its own service account (iam.tf), all built from the one hashed source zip:
# one resource, google_cloudfunctions2_function.function, an instance per entry point of
# local.functions. The fifth, the status page, is an HTTP function for people: status_page.tf.

locals {
  # Per entry point: its function name, service account and service settings (with
  # local.function_descriptions, memory and max_instances below, all that the four functions
  # differ in). Timeouts: 540 s is the maximum for event-driven functions; the tick and an
  # upload can run long (a sweep over every active job; a .jsonl file of many requests).
  # concurrency: the requests one instance serves at once; above 1 it needs cpu = "1" (a whole
  # CPU) and THREADS in framework_env as high, since functions-framework serves cpu_count x 4
  # requests at once unless THREADS says more. cpu = null leaves it unset: Cloud Functions
  # derives it from the memory. eventarc: an Eventarc trigger on the request bucket's
  # notification topic delivers to it when upload_delivery = "eventarc"; every other delivery
  # is a push subscription (pubsub.tf).
  functions = {
    handle_job_request = {
      name          = "flexjobs-handle-job-request"
      account_id    = "flexjobs-job-request"
      timeout       = 300
      concurrency   = 1
      cpu           = null
      framework_env = {}
      eventarc      = false
    }
    handle_job_event = {
      name       = "flexjobs-handle-job-event"
      account_id = "flexjobs-job-event"
      timeout    = 300
      # A hint inside a coalescing window waits for the window to close before it reads; that
      # wait must not hold up other deliveries.
      concurrency   = 20
      cpu           = "1"
      framework_env = { THREADS = "20" }
      eventarc      = false
    }
    handle_scheduler_tick = {
      name          = "flexjobs-handle-scheduler-tick"
      account_id    = "flexjobs-scheduler-tick"
      timeout       = 540
      concurrency   = 1
      cpu           = null
      framework_env = {}
      eventarc      = false
    }
    handle_upload = {
      name          = "flexjobs-handle-upload"
      account_id    = "flexjobs-upload"
      timeout       = 540
      concurrency   = 1
      cpu           = null
      framework_env = {}
      eventarc      = true
    }
  }

  # Kept out of local.functions: checkov expands a for_each only over a map of plain values
  # (an interpolated string stops it), and only then scans each function and each service
  # account of iam.tf one by one.
  function_descriptions = {
    handle_job_request    = "flexjobs: submit one job request from ${var.requests_topic} (or cancel one)."
    handle_job_event      = "flexjobs: re-read the job a state hint on ${var.events_topic} names."
    handle_scheduler_tick = "flexjobs: reconcile every active job against Vertex AI, once a minute (${var.scheduler_ticks_topic})."
    handle_upload         = "flexjobs: submit request files from gs://${local.upload_bucket_name}; record checkpoint progress from the checkpoint buckets."
  }

  max_instances = merge({
    handle_job_request    = 20
    handle_job_event      = 10
    handle_scheduler_tick = 1 # one sweep at a time; a tick that finds it busy is retried
    handle_upload         = 10
    status_page           = 3
  }, var.max_instances)

  memory = merge({
    handle_job_request    = "512Mi"
    handle_job_event      = "1Gi"
    handle_scheduler_tick = "512Mi"
    handle_upload         = "512Mi"
    status_page           = "512Mi"
  }, var.memory)

  longest_timeout = max([for f in values(local.functions) : f.timeout]...)

  # The environment of every function: one map, so the functions never disagree. Exactly the
  # contract's variables that an installation sets; the others stay at the code's defaults
  # (listed in README.md).
  function_env = {
    GOOGLE_CLOUD_PROJECT              = var.project_id
    FLEXJOBS_LOCATION                 = local.vertex_location
    FLEXJOBS_REQUESTS_TOPIC           = google_pubsub_topic.requests.name
    FLEXJOBS_EVENTS_TOPIC             = google_pubsub_topic.events.name
    FLEXJOBS_NOTIFICATIONS_TOPIC      = google_pubsub_topic.notifications.name
    FLEXJOBS_CLAIM_TTL_SECONDS        = tostring(var.claim_ttl_seconds)
    FLEXJOBS_CALL_TIMEOUT_SECONDS     = tostring(var.call_timeout_seconds)
    FLEXJOBS_HINT_COALESCE_SECONDS    = tostring(var.hint_coalesce_seconds)
    FLEXJOBS_ALLOWED_IMAGE_PREFIXES   = join(",", var.allowed_image_prefixes)
    FLEXJOBS_ALLOWED_SERVICE_ACCOUNTS = join(",", var.training_service_accounts)
    FLEXJOBS_UPLOAD_PREFIX            = local.upload_prefix
    FLEXJOBS_MAX_UPLOAD_BYTES         = tostring(var.max_upload_bytes)
    FLEXJOBS_EGRESS_USD_PER_GB        = tostring(var.egress_usd_per_gb)
    FLEXJOBS_ALLOWED_REGIONS          = join(",", var.allowed_regions)
    FLEXJOBS_SERVING_GRACE_SECONDS    = tostring(var.serving_grace_seconds)
    FLEXJOBS_SERVING_HOLD_SECONDS     = tostring(var.serving_hold_seconds)
    # The admission queues' YAML (docs/admission.md); empty turns admission off.
    FLEXJOBS_QUEUES = var.admission_queues
    # The one bucket request files come from; no object of it is ever a checkpoint.
    FLEXJOBS_REQUEST_BUCKET = google_storage_bucket.uploads.name
    # The source zip's content hash: the version Error Reporting groups errors under.
    FLEXJOBS_BUILD = trimsuffix(basename(var.function_source), ".zip")
  }

  # The deployed functions' URIs and services, by entry point.
  function_uris     = { for k, f in google_cloudfunctions2_function.function : k => f.service_config[0].uri }
  function_services = { for k, f in google_cloudfunctions2_function.function : k => f.service_config[0].service }
}

# The source zip, named by its content hash: a new name (changed code) replaces the object and
# redeploys the functions; the same name changes nothing.
resource "google_storage_bucket_object" "source" {
  name   = basename(var.function_source)
  bucket = google_storage_bucket.source.name
  source = var.function_source

  lifecycle {
    create_before_destroy = true # the functions move to the new zip before the old one goes
  }
}

# The functions' images, with a cleanup policy so old builds do not pile up.
resource "google_artifact_registry_repository" "functions" {
  #checkov:skip=CKV_GCP_84:The images hold only the public flexjobs code and its public dependencies; Google-managed encryption is enough and a customer-managed key would add a KMS key and service-agent grants for no data worth it.
  location      = var.region
  repository_id = "flexjobs-functions"
  description   = "Images Cloud Build makes from the flexjobs function source."
  format        = "DOCKER"

  cleanup_policy_dry_run = false
  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      tag_state  = "ANY"
      older_than = "30d"
    }
  }
  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 5 # KEEP wins over DELETE: each function's current image always stays
    }
  }

  depends_on = [google_project_service.apis]
}

# New grants take effect within about a minute; the first build must not start before.
resource "time_sleep" "iam_propagation" {
  create_duration = "60s"

  depends_on = [
    google_project_iam_member.build_log_writer,
    google_storage_bucket_iam_member.build_source_reader,
    google_project_iam_member.build_gcf_sources_reader,
    google_artifact_registry_repository_iam_member.build_writer,
    google_project_iam_member.function_roles,
    google_pubsub_topic_iam_member.storage_agent_notifications,
  ]
}

resource "google_cloudfunctions2_function" "function" {
  for_each = local.functions

  name        = each.value.name
  location    = var.region
  description = local.function_descriptions[each.key]

  build_config {
    runtime           = "python311"
    entry_point       = each.key
    service_account   = google_service_account.build.id
    docker_repository = google_artifact_registry_repository.functions.id
    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    timeout_seconds                  = each.value.timeout
    available_memory                 = local.memory[each.key]
    available_cpu                    = each.value.cpu
    max_instance_count               = local.max_instances[each.key]
    max_instance_request_concurrency = each.value.concurrency
    ingress_settings                 = "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.function[each.key].email
    environment_variables            = merge(local.function_env, each.value.framework_env)
  }

  # upload_delivery = "eventarc": handle_upload's Eventarc Pub/Sub trigger on the request
  # bucket's notification topic (storage.tf). Not an Eventarc storage trigger: that one
  # publishes through a topic Eventarc creates, whose name is not known beforehand, so the Cloud
  # Storage service agent would need publisher on the whole project (Eventarc, "Roles and
  # permissions": for direct Cloud Storage events, grant it the Pub/Sub Publisher role), and any
  # bucket admin could then point a notification at job-requests. Pub/Sub does not honour an IAM
  # condition on a topic's name (Pub/Sub is neither among the resource types that accept
  # conditional bindings nor among the services whose resource attributes conditions see:
  # IAM, "Resource types that accept conditional role bindings" and "Resource attributes for
  # IAM Conditions"). With our own topic the grant is on that topic alone, and a Pub/Sub
  # trigger's identity needs no eventarc.eventReceiver ("You don't need to grant the role if you
  # are routing direct events from Cloud Pub/Sub"). The Eventarc-managed subscription retries
  # (RETRY_POLICY_RETRY) but cannot be given a dead-letter topic here; upload_delivery =
  # "notification" delivers through a push subscription of our own instead (pubsub.tf).
  # Checkpoint events always come through their own push subscription (checkpoint_events).
  dynamic "event_trigger" {
    for_each = each.value.eventarc && var.upload_delivery == "eventarc" ? [1] : []
    content {
      event_type            = "google.cloud.pubsub.topic.v1.messagePublished"
      pubsub_topic          = google_pubsub_topic.upload_notifications.id
      retry_policy          = "RETRY_POLICY_RETRY"
      trigger_region        = var.region
      service_account_email = one(google_service_account.upload_trigger[*].email)
    }
  }

  lifecycle {
    precondition {
      condition     = var.claim_ttl_seconds >= local.longest_timeout
      error_message = "claim_ttl_seconds must be >= the longest function timeout (${local.longest_timeout} s): a claim must outlive the delivery holding it."
    }
  }

  depends_on = [time_sleep.iam_propagation]
}

# Before, each entry point was a resource of its own: the same functions, at their new
# addresses, with no change.
moved {
  from = google_cloudfunctions2_function.handle_job_request
  to   = google_cloudfunctions2_function.function["handle_job_request"]
}

moved {
  from = google_cloudfunctions2_function.handle_job_event
  to   = google_cloudfunctions2_function.function["handle_job_event"]
}

moved {
  from = google_cloudfunctions2_function.handle_scheduler_tick
  to   = google_cloudfunctions2_function.function["handle_scheduler_tick"]
}

moved {
  from = google_cloudfunctions2_function.handle_upload
  to   = google_cloudfunctions2_function.function["handle_upload"]
}
