"""The knowledge below rules and the image stage: compatibility data, and the image-label contract."""
