# The tick: Cloud Scheduler publishes to the ticks topic every minute, and the push
# subscription (pubsub.tf) delivers it to handle_scheduler_tick. A Pub/Sub target needs no
# service account: Cloud Scheduler publishes as its own service agent.

resource "google_cloud_scheduler_job" "tick" {
  name        = "flexjobs-tick"
  description = "flexjobs: reconcile every active job against Vertex AI."
  region      = var.region
  schedule    = var.tick_schedule
  time_zone   = "Etc/UTC"

  pubsub_target {
    topic_name = google_pubsub_topic.ticks.id
    data       = base64encode(jsonencode({ tick = "cloud-scheduler" }))
  }

  # A publish that fails is retried within the minute; the next tick does the same work.
  retry_config {
    retry_count          = 3
    max_retry_duration   = "50s"
    min_backoff_duration = "5s"
    max_backoff_duration = "20s"
  }

  depends_on = [google_project_service.apis]
}
