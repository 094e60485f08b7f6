"""retarget.ros"""
