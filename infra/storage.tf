# Buckets: the function source; the request bucket (google_storage_bucket.uploads), whose new
# request files handle_upload takes; and the notifications of both the request bucket and the
# checkpoint buckets (user-owned, any region or project), each to a topic of its own.
#
# Requests and checkpoints never share trust. Whoever may write the request bucket may submit
# and cancel requests; whoever may write a checkpoint bucket may write checkpoints. Were they
# one bucket, a training container could drop request files and an uploader could forge any
# job's checkpoint markers. So the request bucket holds request files only: no checkpoint
# bucket may be it (the precondition below), the functions never read checkpoints there
# (iam.tf), and the code takes no object of it as a checkpoint (FLEXJOBS_REQUEST_BUCKET).

resource "google_storage_bucket" "source" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (turn on Data Access logs for Cloud Storage to see reads); usage-log delivery would need a second bucket, itself unlogged, for objects only Terraform and Cloud Functions touch.
  name                        = local.source_bucket_name
  location                    = var.region
  force_destroy               = true # only build inputs, all reproducible with ./dev package
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = true
  }

  # A new source zip has a new name; Terraform deletes the old object, which versioning keeps
  # as a noncurrent version for 30 days (time to roll back), then this rule removes it.
  lifecycle_rule {
    condition {
      with_state                 = "ARCHIVED"
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# The request bucket: request files under upload_prefix, and nothing else flexjobs reads. Kept
# in the function region, where it has always been.
resource "google_storage_bucket" "uploads" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (turn on Data Access logs for Cloud Storage to see reads); usage-log delivery would need a second bucket, itself unlogged.
  #checkov:skip=CKV_GCP_78:Versioning stays off on purpose: flexjobs reads each request file once, at the generation its event names, and never an older one; keeping every overwritten file would only cost storage. A request file's default ids derive from its content (bytes, name, line), so restoring an old version would run nothing again.
  name                        = local.upload_bucket_name
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"

  versioning {
    enabled = false
  }

  # Request files are read once; only objects under the request prefix expire.
  dynamic "lifecycle_rule" {
    for_each = var.upload_retention_days > 0 && local.upload_prefix != "" ? [1] : []
    content {
      condition {
        age            = var.upload_retention_days
        matches_prefix = [local.upload_prefix]
      }
      action {
        type = "Delete"
      }
    }
  }

  lifecycle {
    precondition {
      condition     = !contains(var.checkpoint_buckets, local.upload_bucket_name)
      error_message = "checkpoint_buckets must not name the request bucket (${local.upload_bucket_name}): requests and checkpoints never share a bucket. Write checkpoints to a bucket of their own."
    }
  }

  depends_on = [google_project_service.apis]
}

# --- The request bucket's notifications --------------------------------------------------------
# The bucket publishes OBJECT_FINALIZE (payloadFormat JSON_API_V1) of the objects under
# upload_prefix to upload_notifications_topic, in both upload_delivery modes: "eventarc" mode
# delivers the topic with an Eventarc Pub/Sub trigger (functions.tf), "notification" mode with
# a push subscription and a dead-letter topic (pubsub.tf). Either way the Cloud Storage service
# agent publishes to that one topic, and to no other of this project.

resource "google_pubsub_topic_iam_member" "storage_agent_notifications" {
  topic  = google_pubsub_topic.upload_notifications.id
  role   = "roles/pubsub.publisher"
  member = local.storage_service_agent
}

resource "google_storage_notification" "uploads" {
  bucket         = google_storage_bucket.uploads.name
  payload_format = "JSON_API_V1"
  topic          = google_pubsub_topic.upload_notifications.id
  event_types    = ["OBJECT_FINALIZE"]
  # Only request files are ever read from this bucket; nothing else needs an event.
  object_name_prefix = local.upload_prefix

  depends_on = [google_pubsub_topic_iam_member.storage_agent_notifications]
}

# Both existed in notification mode only (count = 1) before.
moved {
  from = google_pubsub_topic_iam_member.storage_agent_notifications[0]
  to   = google_pubsub_topic_iam_member.storage_agent_notifications
}

moved {
  from = google_storage_notification.uploads[0]
  to   = google_storage_notification.uploads
}

# --- The checkpoint buckets' notifications (live checkpoint progress) -------------------------
# Each bucket of checkpoint_notification_buckets (default: every checkpoint bucket) publishes
# OBJECT_FINALIZE (JSON_API_V1) of every object to checkpoint_events_topic, which pubsub.tf
# pushes to handle_upload with a dead-letter topic. The provider takes the topic by its full
# name (projects/P/topics/T), so the bucket may be of another project and any location. An
# event only names an object: the code trusts a marker for a job only under the
# checkpointPrefix of that job's record, and only once its own listing of the step directory
# confirms the checkpoint.
#
# The bucket's notifications are published by the Cloud Storage service agent of the project
# that owns the bucket ("service-PROJECT_NUMBER@gs-project-accounts"), so each owning project's
# agent gets publisher on the checkpoint topic only. The bucket tells its project number; the
# agent's email is read rather than spelled, as the provider advises (the read also creates the
# agent when missing; the API takes a project ID or number).

data "google_storage_bucket" "checkpoints" {
  for_each = local.checkpoint_notify_buckets

  name = each.value

  lifecycle {
    precondition {
      condition     = contains(var.checkpoint_buckets, each.value)
      error_message = "checkpoint_notification_buckets names ${each.value}, which is not one of checkpoint_buckets: only buckets the retries read may report progress."
    }
  }
}

data "google_storage_project_service_account" "checkpoints" {
  for_each = local.checkpoint_notify_buckets

  project = tostring(data.google_storage_bucket.checkpoints[each.key].project_number)
}

# Authoritative for the publisher role on this topic: the owning projects' Cloud Storage
# agents are its only publishers (a grant made by hand is removed at the next apply).
resource "google_pubsub_topic_iam_binding" "storage_agents_checkpoint_events" {
  count = length(local.checkpoint_notify_buckets) > 0 ? 1 : 0

  topic   = google_pubsub_topic.checkpoint_events[0].id
  role    = "roles/pubsub.publisher"
  members = distinct([for agent in data.google_storage_project_service_account.checkpoints : agent.member])
}

resource "google_storage_notification" "checkpoints" {
  for_each = local.checkpoint_notify_buckets

  bucket         = each.value
  payload_format = "JSON_API_V1"
  topic          = google_pubsub_topic.checkpoint_events[0].id
  event_types    = ["OBJECT_FINALIZE"]

  depends_on = [google_pubsub_topic_iam_binding.storage_agents_checkpoint_events]
}
