# Topics of the contract, and the push paths that deliver them to the functions.
#
# Every push path is a subscription of our own (not an Eventarc-managed one), because only our
# own subscription can carry what a push path needs: a dead-letter topic, max_delivery_attempts
# and an exponential retry policy. Each dead-letter topic has a pull subscription,
# "<topic>-dead-letter-inspect", for operators:
#   gcloud pubsub subscriptions pull job-requests-dead-letter-inspect --auto-ack --limit=10

resource "google_pubsub_topic" "requests" {
  #checkov:skip=CKV_GCP_83:Pub/Sub encrypts at rest with Google-managed keys; a customer-managed key would add a Cloud KMS key (billed per key version and operation) and a grant to the Pub/Sub service agent, for messages that hold job requests and hints, never credentials.
  name = var.requests_topic

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "events" {
  #checkov:skip=CKV_GCP_83:Pub/Sub encrypts at rest with Google-managed keys; a customer-managed key would add a Cloud KMS key (billed per key version and operation) and a grant to the Pub/Sub service agent, for messages that hold job requests and hints, never credentials.
  name = var.events_topic

  depends_on = [google_project_service.apis]
}

# flexjobs only publishes here; subscribe to it from whatever consumes notifications.
resource "google_pubsub_topic" "notifications" {
  #checkov:skip=CKV_GCP_83:Pub/Sub encrypts at rest with Google-managed keys; a customer-managed key would add a Cloud KMS key (billed per key version and operation) and a grant to the Pub/Sub service agent, for messages that hold job requests and hints, never credentials.
  name = var.notifications_topic

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "ticks" {
  #checkov:skip=CKV_GCP_83:Pub/Sub encrypts at rest with Google-managed keys; a customer-managed key would add a Cloud KMS key (billed per key version and operation) and a grant to the Pub/Sub service agent, for messages that hold job requests and hints, never credentials.
  name = var.scheduler_ticks_topic

  depends_on = [google_project_service.apis]
}

# The request bucket's Pub/Sub notifications (storage.tf), in both upload_delivery modes: in
# "eventarc" mode an Eventarc Pub/Sub trigger on this topic delivers them, in "notification"
# mode a push subscription below. Only the Cloud Storage service agent may publish here.
resource "google_pubsub_topic" "upload_notifications" {
  #checkov:skip=CKV_GCP_83:Pub/Sub encrypts at rest with Google-managed keys; a customer-managed key would add a Cloud KMS key (billed per key version and operation) and a grant to the Pub/Sub service agent, for messages that hold job requests and hints, never credentials.
  name = var.upload_notifications_topic

  depends_on = [google_project_service.apis]
}

# Before, the topic existed in notification mode only (count = 1).
moved {
  from = google_pubsub_topic.upload_notifications[0]
  to   = google_pubsub_topic.upload_notifications
}

# The checkpoint buckets' Pub/Sub notifications (storage.tf): live checkpoint progress, apart
# from the request bucket's events. None when no bucket notifies (checkpoint_notification_buckets).
resource "google_pubsub_topic" "checkpoint_events" {
  #checkov:skip=CKV_GCP_83:Pub/Sub encrypts at rest with Google-managed keys; a customer-managed key would add a Cloud KMS key (billed per key version and operation) and a grant to the Pub/Sub service agent, for messages that hold job requests and hints, never credentials.
  count = length(local.checkpoint_notify_buckets) > 0 ? 1 : 0

  name = var.checkpoint_events_topic

  depends_on = [google_project_service.apis]
}

locals {
  # One entry per push path, keyed by the entry point it delivers to (checkpoint_events also
  # goes to handle_upload; the keys stay the entry points' so that no existing subscription is
  # replaced). ack_deadline bounds the push request, so it is at least the function's timeout:
  # Pub/Sub never redelivers a message while its first delivery still runs. handle_job_event
  # gets the maximum (600 s): a hint inside a coalescing window waits for the window before it
  # reads.
  #
  # requests: the path carries requests, whose delivery takes a submission claim; a live claim
  # must never use up its deliveries (the precondition on google_pubsub_subscription.push).
  # minimum_backoff: the shortest wait between two deliveries of one message. The other paths
  # keep 10 s: a hint about a job not recorded yet is redelivered while it is recent
  # (FLEXJOBS_HINT_RECENT_SECONDS, 15 s), and hints, ticks and checkpoint events are safe to
  # dead-letter (the tick reconciles every job, and a retry lists the checkpoints itself).
  #
  # handle_upload has a push path in notification mode only, and checkpoint_events only when
  # a bucket notifies: filters, since a conditional between two object shapes does not
  # type-check.
  push_paths = {
    for name, path in {
      handle_job_request = {
        topic           = google_pubsub_topic.requests.name
        topic_id        = google_pubsub_topic.requests.id
        function        = "handle_job_request"
        ack_deadline    = local.functions.handle_job_request.timeout
        retention       = "604800s"
        requests        = true
        minimum_backoff = var.request_minimum_backoff_seconds
      }
      handle_job_event = {
        topic           = google_pubsub_topic.events.name
        topic_id        = google_pubsub_topic.events.id
        function        = "handle_job_event"
        ack_deadline    = 600
        retention       = "604800s"
        requests        = false
        minimum_backoff = 10
      }
      handle_scheduler_tick = {
        topic        = google_pubsub_topic.ticks.name
        topic_id     = google_pubsub_topic.ticks.id
        function     = "handle_scheduler_tick"
        ack_deadline = local.functions.handle_scheduler_tick.timeout
        # A tick is worth nothing ten minutes later (the next one does the same work): stale
        # ticks expire instead of piling up behind a slow one. 600 s is Pub/Sub's minimum.
        retention       = "600s"
        requests        = false
        minimum_backoff = 10
      }
      handle_upload = {
        topic           = google_pubsub_topic.upload_notifications.name
        topic_id        = google_pubsub_topic.upload_notifications.id
        function        = "handle_upload"
        ack_deadline    = local.functions.handle_upload.timeout
        retention       = "604800s"
        requests        = true
        minimum_backoff = var.request_minimum_backoff_seconds
      }
      checkpoint_events = {
        topic           = one(google_pubsub_topic.checkpoint_events[*].name)
        topic_id        = one(google_pubsub_topic.checkpoint_events[*].id)
        function        = "handle_upload"
        ack_deadline    = local.functions.handle_upload.timeout
        retention       = "604800s"
        requests        = false
        minimum_backoff = 10
      }
    } : name => path if(name != "handle_upload" || var.upload_delivery == "notification") && (name != "checkpoint_events" || length(local.checkpoint_notify_buckets) > 0)
  }

  # The functions the push paths deliver to (the push invoker's grants, iam.tf).
  pushed_functions = toset([for path in values(local.push_paths) : path.function])
}

resource "google_pubsub_topic" "dead_letter" {
  #checkov:skip=CKV_GCP_83:Pub/Sub encrypts at rest with Google-managed keys; a customer-managed key would add a Cloud KMS key (billed per key version and operation) and a grant to the Pub/Sub service agent, for messages that hold job requests and hints, never credentials.
  for_each = local.push_paths

  name = "${each.value.topic}-dead-letter"

  depends_on = [google_project_service.apis]
}

resource "google_pubsub_subscription" "dead_letter_inspect" {
  for_each = local.push_paths

  name                       = "${each.value.topic}-dead-letter-inspect"
  topic                      = google_pubsub_topic.dead_letter[each.key].id
  ack_deadline_seconds       = 60
  message_retention_duration = "2678400s" # 31 days, the maximum: time to look before it is gone

  expiration_policy {
    ttl = "" # never expires, however long nobody reads it
  }
}

resource "google_pubsub_subscription" "push" {
  for_each = local.push_paths

  name                       = "${each.value.topic}-push"
  topic                      = each.value.topic_id
  ack_deadline_seconds       = each.value.ack_deadline
  message_retention_duration = each.value.retention

  push_config {
    push_endpoint = local.function_uris[each.value.function]

    # The audience defaults to the push endpoint, the function's run.app URL, which is what
    # Cloud Run checks. The invoker holds roles/run.invoker on these functions only.
    oidc_token {
      service_account_email = google_service_account.push_invoker.email
    }
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[each.key].id
    max_delivery_attempts = var.max_delivery_attempts
  }

  retry_policy {
    minimum_backoff = "${each.value.minimum_backoff}s"
    maximum_backoff = "600s"
  }

  expiration_policy {
    ttl = ""
  }

  lifecycle {
    # A live claim must never use up a request's deliveries. A delivery that crashes between
    # Vertex's create and the record (or whose create's outcome is unknown) keeps its claim
    # until claim_ttl_seconds after it was taken; every redelivery before then fails at once
    # on the live claim (SubmissionInProgress) and counts as a delivery attempt. So the last
    # of the max_delivery_attempts deliveries must begin after the claim expired, on the
    # shortest schedule Pub/Sub may keep:
    #
    #   (max_delivery_attempts - 1) x minimum_backoff  >  claim_ttl_seconds
    #
    # Why that schedule. Pub/Sub's RetryPolicy (google.pubsub.v1, pubsub.proto) says the
    # delay "will be exponential based on provided minimum and maximum backoffs" and defines
    # minimum_backoff as "the minimum delay between consecutive deliveries of a given
    # message"; it documents no growth factor. The shortest schedule that documentation
    # allows is every redelivery after minimum_backoff, so maximum_backoff never enters it.
    # The deliveries' own durations add nothing to it either: a redelivery that meets the
    # live claim fails at its first read, and the crashed delivery may have died right after
    # claiming (the claim's expiry counts from then). Hints, ticks and checkpoint events carry
    # no request (requests = false) and are safe to dead-letter. The same RetryPolicy says
    # the retry policy is "best effort ... delay can be more or less than configured
    # backoff": past this margin, the tick takes over ACCEPTED records whose claim expired,
    # so a dead-lettered request is still submitted (README.md, Dead letters).
    precondition {
      condition     = !each.value.requests || (var.max_delivery_attempts - 1) * each.value.minimum_backoff > var.claim_ttl_seconds
      error_message = "${each.value.topic}-push: ${var.max_delivery_attempts - 1} redeliveries at least ${each.value.minimum_backoff} s apart take ${(var.max_delivery_attempts - 1) * each.value.minimum_backoff} s, not more than claim_ttl_seconds (${var.claim_ttl_seconds} s): a request whose claim outlives them is dead-lettered. Raise max_delivery_attempts or request_minimum_backoff_seconds (or lower claim_ttl_seconds, never below the longest function timeout, ${local.longest_timeout} s)."
    }
  }

  depends_on = [
    google_cloud_run_service_iam_member.push_invoker,
    google_pubsub_topic_iam_member.dead_letter_publisher,
  ]
}

# Dead-lettering is done by the Pub/Sub service agent: it must publish to each dead-letter
# topic and acknowledge (subscriber) on each source subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  for_each = local.push_paths

  topic  = google_pubsub_topic.dead_letter[each.key].id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  for_each = local.push_paths

  subscription = google_pubsub_subscription.push[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}
